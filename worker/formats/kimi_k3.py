"""Kimi K3 (XTML): ``<|open|>tools<|sep|>`` around ``<|open|>call tool="NAME" index="N"<|sep|>`` with one
``<|open|>argument key="ARG" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>`` per argument.

Only ``type="string"`` values are raw text; the others are JSON. The answer sits between
``<|open|>response<|sep|>`` and ``<|close|>response<|sep|>``; thinking, which the prompt opens,
ends at ``<|close|>think<|sep|>`` and is dropped.
"""

from __future__ import annotations

import re

from worker.formats.base import ParsedOutput
from worker.formats.xmlcalls import XmlCallFormat

THINK_OPEN = "<|open|>think<|sep|>"
THINK_CLOSE = "<|close|>think<|sep|>"


class KimiK3Format(XmlCallFormat):
    name = "kimi_k3"
    trigger = "<|open|>tools<|sep|>"
    call_head = re.compile(r'<\|open\|>call tool="(?P<name>[^"]+)"[^<]*<\|sep\|>')
    param_head = re.compile(r'<\|open\|>argument key="(?P<key>[^"]+)"(?: type="(?P<type>\w+)")?<\|sep\|>')
    value_end = "<|close|>argument<|sep|>"
    call_end = "<|close|>call<|sep|>"
    section_open = "<|open|>tools<|sep|>"
    section_close = "<|close|>tools<|sep|>"
    separator = ""
    call_open = '<|open|>call tool="{name}" index="{index}"<|sep|>'
    param_open = '<|open|>argument key="{key}" type="{type}"<|sep|>'
    param_close = "<|close|>argument<|sep|>"
    call_close = "<|close|>call<|sep|>"
    noise = (
        section_open,
        section_close,
        "<|open|>response<|sep|>",
        "<|close|>response<|sep|>",
        "<|close|>message<|sep|>",
        "<|end_of_msg|>",
    )

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        if isinstance(text, str):
            close = text.find(THINK_CLOSE)
            if close != -1 and THINK_OPEN not in text[:close]:
                text = text[close + len(THINK_CLOSE) :]
            text = re.sub(re.escape(THINK_OPEN) + ".*?(?:" + re.escape(THINK_CLOSE) + "|$)", "", text, flags=re.DOTALL)
        return super().parse(text, tool_names)


FORMAT = KimiK3Format()
