"""Qwen3-Coder's XML calls (also Qwen3.5, Nemotron 3, StepFun 3.5): one element per argument.

``<tool_call>\\n<function=NAME>\\n<parameter=ARG>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``;
the reading and writing are worker/formats/xmlcalls.py's.
"""

from __future__ import annotations

import re

from worker.formats.xmlcalls import XmlCallFormat


class Qwen3CoderFormat(XmlCallFormat):
    name = "qwen3_coder"
    trigger = "<tool_call>"
    call_head = re.compile(r"<function=(?P<name>[^>\n]+)>")
    param_head = re.compile(r"<parameter=(?P<key>[^>\n]+)>")
    value_end = "</parameter>"
    call_end = "</function>"
    trim_newline = True
    call_open = "<tool_call>\n<function={name}>\n"
    param_open = "<parameter={key}>\n"
    param_close = "\n</parameter>\n"
    call_close = "</function>\n</tool_call>"
    noise = ("<tool_call>", "</tool_call>")


FORMAT = Qwen3CoderFormat()
