# ruff: noqa: RUF001, RUF002 - DeepSeek's markers are spelled with fullwidth bars (U+FF5C).
"""DeepSeek V3.2 and V4 (DSML): ``<｜DSML｜invoke name="NAME">`` with typed parameter elements.

``<｜DSML｜parameter name="ARG" string="true">text</｜DSML｜parameter>``; ``string="false"`` marks a
JSON value. V3.2 wraps a turn's calls in ``<｜DSML｜function_calls>``, V4 in ``<｜DSML｜tool_calls>``;
both parsers read both.
"""

from __future__ import annotations

import re

from worker.formats.xmlcalls import XmlCallFormat

_D = "｜DSML｜"


class DeepseekV32Format(XmlCallFormat):
    name = "deepseek_v3_2"
    trigger = f"<{_D}function_calls>"
    call_head = re.compile(f'<{_D}invoke name="(?P<name>[^"]+)">')
    param_head = re.compile(f'<{_D}parameter name="(?P<key>[^"]+)"(?: string="(?P<string>true|false)")?>')
    value_end = f"</{_D}parameter>"
    call_end = f"</{_D}invoke>"
    section_open = f"<{_D}function_calls>\n"
    section_close = f"\n</{_D}function_calls>"
    call_open = f'<{_D}invoke name="{{name}}">\n'
    param_open = f'<{_D}parameter name="{{key}}" string="{{string}}">'
    param_close = f"</{_D}parameter>\n"
    call_close = f"</{_D}invoke>"
    noise = tuple(f"{tag}{_D}{kind}>" for tag in ("<", "</") for kind in ("function_calls", "tool_calls"))


class DeepseekV4Format(DeepseekV32Format):
    name = "deepseek_v4"
    trigger = f"<{_D}tool_calls>"
    section_open = f"<{_D}tool_calls>\n"
    section_close = f"\n</{_D}tool_calls>"


FORMAT = DeepseekV32Format()
FORMAT_V4 = DeepseekV4Format()
