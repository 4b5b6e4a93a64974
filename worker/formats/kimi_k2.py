"""Kimi K2: ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|>``
inside ``<|tool_calls_section_begin|>`` ... ``<|tool_calls_section_end|>``."""

from __future__ import annotations

import re

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.marked import MarkedJsonFormat
from worker.grammar import literal

_ARGS = "<|tool_call_argument_begin|>"


class KimiK2Format(MarkedJsonFormat):
    name = "kimi_k2"
    trigger = "<|tool_calls_section_begin|>"
    head = re.compile(
        r"<\|tool_call_begin\|>\s*(?:functions\.)?(?P<name>[^:<\s]+)(?::\d+)?\s*<\|tool_call_argument_begin\|>"
    )
    section_open = "<|tool_calls_section_begin|>"
    section_close = "<|tool_calls_section_end|>"
    open = "<|tool_call_begin|>functions."
    close = "<|tool_call_end|>"
    noise = (section_open, section_close)

    def render_call(self, call: ToolCall, i: int) -> str:
        return f"{self.open}{call.name}:{i}{_ARGS}{jsonish.dumps(call.arguments)}{self.close}"

    def open_gbnf(self, name: str) -> str:
        return f"{literal(self.open + name + ':')} [0-9]{{1,3}} {literal(_ARGS)}"


FORMAT = KimiK2Format()
