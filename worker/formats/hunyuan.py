"""Tencent Hunyuan 3: GLM's key/value pairs in ``:opensource`` tags.

``<tool_calls:opensource>\\n<tool_call:opensource>NAME<tool_sep:opensource>\\n<arg_key:opensource>ARG``
``</arg_key:opensource>\\n<arg_value:opensource>VALUE</arg_value:opensource>\\n</tool_call:opensource>``
"""

from __future__ import annotations

import re

from worker.formats.xmlcalls import XmlCallFormat


class HunyuanFormat(XmlCallFormat):
    name = "hunyuan"
    trigger = "<tool_calls:opensource>"
    call_head = re.compile(r"<tool_call:opensource>\s*(?P<name>[^\s<]+)\s*<tool_sep:opensource>")
    param_head = re.compile(r"<arg_key:opensource>(?P<key>[^<]*)</arg_key:opensource>\s*<arg_value:opensource>")
    value_end = "</arg_value:opensource>"
    call_end = "</tool_call:opensource>"
    section_open = "<tool_calls:opensource>\n"
    section_close = "\n</tool_calls:opensource>"
    call_open = "<tool_call:opensource>{name}<tool_sep:opensource>\n"
    param_open = "<arg_key:opensource>{key}</arg_key:opensource>\n<arg_value:opensource>"
    param_close = "</arg_value:opensource>\n"
    call_close = "</tool_call:opensource>"
    noise = ("<tool_calls:opensource>", "</tool_calls:opensource>")


FORMAT = HunyuanFormat()
