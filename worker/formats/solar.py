"""Upstage Solar Open: ``<|tool_calls|>`` then per call
``<|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|>``."""

from __future__ import annotations

import re

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.marked import MarkedJsonFormat
from worker.grammar import literal

_BEGIN = "<|tool_call:begin|>"
_NAME = "<|tool_call:name|>"
_ARGS = "<|tool_call:args|>"


class SolarFormat(MarkedJsonFormat):
    name = "solar"
    trigger = "<|tool_calls|>"
    head = re.compile(r"<\|tool_call:begin\|>[^<]*<\|tool_call:name\|>(?P<name>[^<]+)<\|tool_call:args\|>")
    section_open = "<|tool_calls|>"
    close = "<|tool_call:end|>"
    noise = ("<|tool_calls|>", "<|calls|>")

    def render_call(self, call: ToolCall, i: int) -> str:
        return f"{_BEGIN}call_{i}{_NAME}{call.name}{_ARGS}{jsonish.dumps(call.arguments)}{self.close}"

    def open_gbnf(self, name: str) -> str:
        return f"{literal(_BEGIN)} [A-Za-z0-9_]{{1,16}} {literal(_NAME + name + _ARGS)}"


FORMAT = SolarFormat()
