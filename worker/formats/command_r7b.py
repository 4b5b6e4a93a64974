"""Cohere Command R7B and Command A (Cohere2): ``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ...,
"parameters": {...}}]<|END_ACTION|>``, with reasoning between ``<|START_THINKING|>`` and
``<|END_THINKING|>`` (dropped) and the answer between ``<|START_RESPONSE|>`` and ``<|END_RESPONSE|>``."""

from __future__ import annotations

import json
import re
from typing import Any

from toolq.wire.protocol import ToolCall
from worker.formats.base import ParsedOutput, ToolDefinition
from worker.formats.common import tool_name, tool_params
from worker.formats.marked import MarkedJsonFormat
from worker.grammar import GrammarBuilder, literal, rule_name

_THINKING = re.compile(r"<\|START_THINKING\|>.*?(?:<\|END_THINKING\|>|$)", re.DOTALL)


class CommandR7bFormat(MarkedJsonFormat):
    name = "command_r7b"
    trigger = "<|START_ACTION|>"
    head = re.compile(r"<\|START_ACTION\|>")
    named = False
    open = "<|START_ACTION|>"
    close = "<|END_ACTION|>"
    name_key = "tool_name"
    args_key = "parameters"
    noise = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>", "<|END_THINKING|>")

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        return super().parse(_THINKING.sub("", text) if isinstance(text, str) else str(text), tool_names)

    def call_object(self, call: ToolCall, i: int) -> dict[str, Any]:
        return {"tool_call_id": str(i), "tool_name": call.name, "parameters": call.arguments}

    def object_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        base = rule_name(tool_name(tool)) + "-call"
        name = b.add(base + "-name", literal(json.dumps(tool_name(tool), ensure_ascii=False)) + " space")
        args = b.schema(tool_params(tool), base + "-args")
        call_id = b.add(
            "call-id",
            f'{literal(chr(34) + "tool_call_id" + chr(34))} space ":" space "\\"" [0-9]+ "\\"" space "," space',
        )
        body = (
            f'"{{" space {call_id}? {literal(chr(34) + "tool_name" + chr(34))} space ":" space {name} "," space '
            f'{literal(chr(34) + "parameters" + chr(34))} space ":" space {args} "}}" space'
        )
        return body


FORMAT = CommandR7bFormat()
