"""Functionary v3.1 (Llama 3.1 based): ``<function=NAME>{...}</function>``, and raw Python after
``<|python_tag|>``, read as a call of ``python`` with ``{"code": ...}``."""

from __future__ import annotations

import re

from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats.base import ParsedOutput
from worker.formats.marked import MarkedJsonFormat

PYTHON_TAG = "<|python_tag|>"


class FunctionaryV31Format(MarkedJsonFormat):
    name = "functionary_v3_1"
    trigger = "<function="
    head = re.compile(r"<function=(?P<name>[^>\n]+)>")
    open = "<function="
    mid = ">"
    close = "</function>"
    noise = ("<|eom_id|>", "<|eot_id|>")

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        text = text if isinstance(text, str) else str(text)
        before, tag, code = text.partition(PYTHON_TAG)
        out = super().parse(before, tool_names)
        for mark in self.noise:
            code = code.replace(mark, "")
        if tag and code.strip():
            out.tool_calls.append(ToolCall(function=FunctionCall(name="python", arguments={"code": code})))
        return out


FORMAT = FunctionaryV31Format()
