# ruff: noqa: RUF001, RUF002 - DeepSeek's markers are spelled with fullwidth bars (U+FF5C).
"""DeepSeek R1 and V3.1 markers: ``<｜tool▁calls▁begin｜>`` around one ``<｜tool▁call▁begin｜>`` per call.

R1 writes ``function<｜tool▁sep｜>NAME`` then the arguments in a ```json fence; V3.1 writes
``NAME<｜tool▁sep｜>`` then bare JSON. Both parsers read both forms.
"""

from __future__ import annotations

import re

from worker.formats.marked import MarkedJsonFormat

BEGIN = "<｜tool▁calls▁begin｜>"
END = "<｜tool▁calls▁end｜>"
_HEAD = re.compile(
    r"<｜tool▁call▁begin｜>\s*(?:function\s*<｜tool▁sep｜>\s*(?P<name>[^\n<]+)|(?P<name2>[^<]+?)\s*<｜tool▁sep｜>)"
)


class DeepseekR1Format(MarkedJsonFormat):
    name = "deepseek_r1"
    trigger = BEGIN
    head = _HEAD
    section_open = BEGIN
    section_close = END
    open = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
    mid = "\n```json\n"
    close = "\n```<｜tool▁call▁end｜>"
    separator = "\n"
    noise = (BEGIN, END, "<｜tool▁call▁end｜>", "<｜end▁of▁sentence｜>")


class DeepseekV31Format(DeepseekR1Format):
    name = "deepseek_v3_1"
    open = "<｜tool▁call▁begin｜>"
    mid = "<｜tool▁sep｜>"
    close = "<｜tool▁call▁end｜>"
    separator = ""


FORMAT = DeepseekR1Format()
FORMAT_V3_1 = DeepseekV31Format()
