"""Families that write a JSON array of ``{"name", "arguments"}`` calls between their own tags:
Nemotron Nano 2 ``<TOOLCALL>[...]</TOOLCALL>``, Apriel ``<tool_calls>[...]</tool_calls>``,
Apertus ``<|tools_prefix|>[{"NAME": {...}}]<|tools_suffix|>``, GigaChat 3.1 ``<|function_call|>{...}``,
MiniMax M1 ``<tool_calls>`` with one call object per line, FireFunction v2 `` functools[...]``,
GigaChat 3 a ``function call`` message."""

from __future__ import annotations

import json
import re
from typing import Any

from toolq.wire.protocol import ToolCall
from worker.formats.base import ToolDefinition
from worker.formats.common import tool_name, tool_params
from worker.formats.marked import MarkedJsonFormat
from worker.grammar import GrammarBuilder, literal, rule_name


class NemotronV2Format(MarkedJsonFormat):
    name = "nemotron_v2"
    trigger = "<TOOLCALL>"
    head = re.compile(r"<TOOLCALL>")
    named = False
    open = "<TOOLCALL>"
    close = "</TOOLCALL>"


class AprielFormat(MarkedJsonFormat):
    name = "apriel"
    trigger = "<tool_calls>"
    head = re.compile(r"<tool_calls>")
    named = False
    open = "<tool_calls>"
    close = "</tool_calls>"


class MinimaxM1Format(MarkedJsonFormat):
    """One call object per line between ``<tool_calls>`` and ``</tool_calls>``."""

    name = "minimax_m1"
    trigger = "<tool_calls>"
    # The section's opening, or a line break right after a call object: the next call.
    head = re.compile(r"<tool_calls>|(?<=\})[ \t]*\n(?=\s*\{)")
    named = False
    array = False
    section_open = "<tool_calls>\n"
    section_close = "\n</tool_calls>"
    separator = "\n"
    noise = ("</tool_calls>",)


class FirefunctionFormat(MarkedJsonFormat):
    name = "firefunction"
    trigger = " functools["
    head = re.compile(r"\s?functools(?=\[)")
    named = False
    open = " functools"


class Gigachat3Format(MarkedJsonFormat):
    """GigaChat 3: the call is a message of its own, from the role ``function call``."""

    name = "gigachat3"
    # the whole opening: "<|message_sep|>" alone also ends every answer
    trigger = "<|message_sep|>\n\nfunction call<|role_sep|>"
    head = re.compile(r"function call<\|role_sep\|>")
    named = False
    array = False
    open = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
    noise = ("<|message_sep|>",)


class GigachatFormat(MarkedJsonFormat):
    name = "gigachat"
    trigger = "<|function_call|>"
    head = re.compile(r"<\|function_call\|>")
    named = False
    array = False
    open = "<|function_call|>"
    noise = ("<|message_sep|>",)


class ApertusFormat(MarkedJsonFormat):
    """Each call is an object with one key, the tool's name, whose value is the arguments."""

    name = "apertus"
    trigger = "<|tools_prefix|>"
    head = re.compile(r"<\|tools_prefix\|>")
    named = False
    open = "<|tools_prefix|>"
    close = "<|tools_suffix|>"

    def normalize(self, value: Any) -> Any:
        if isinstance(value, dict) and len(value) == 1 and "name" not in value:
            ((key, args),) = value.items()
            return {"name": key, "arguments": args}
        return value

    def call_object(self, call: ToolCall, i: int) -> dict[str, Any]:
        return {call.name: call.arguments}

    def object_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        base = rule_name(tool_name(tool)) + "-call"
        args = b.schema(tool_params(tool), base + "-args")
        key = literal(json.dumps(tool_name(tool), ensure_ascii=False))
        return f'"{{" space {key} space ":" space {args} "}}" space'


NEMOTRON_V2 = NemotronV2Format()
APRIEL = AprielFormat()
GIGACHAT = GigachatFormat()
APERTUS = ApertusFormat()
MINIMAX_M1 = MinimaxM1Format()
FIREFUNCTION = FirefunctionFormat()
GIGACHAT3 = Gigachat3Format()
