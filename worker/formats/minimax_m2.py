"""MiniMax M2: ``<minimax:tool_call>`` around ``<invoke name="NAME">`` with ``<parameter name="ARG">`` elements."""

from __future__ import annotations

import re

from worker.formats.xmlcalls import XmlCallFormat


class MinimaxM2Format(XmlCallFormat):
    name = "minimax_m2"
    trigger = "<minimax:tool_call>"
    call_head = re.compile(r'<invoke name="(?P<name>[^"]+)">')
    param_head = re.compile(r'<parameter name="(?P<key>[^"]+)">')
    value_end = "</parameter>"
    call_end = "</invoke>"
    section_open = "<minimax:tool_call>\n"
    section_close = "\n</minimax:tool_call>"
    call_open = '<invoke name="{name}">\n'
    param_open = '<parameter name="{key}">'
    param_close = "</parameter>\n"
    call_close = "</invoke>"
    noise = ("<minimax:tool_call>", "</minimax:tool_call>")


FORMAT = MinimaxM2Format()
