"""Gemma 4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, in Gemma's own object notation.

Keys are bare; strings sit between ``<|"|>`` marks, raw (a quote or brace inside is text); numbers,
``true``, ``false``, objects and lists are written as in JSON. Arguments come in key order (the
template sorts them). Thinking, between ``<|channel>`` and ``<channel|>``, is dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, ToolDefinition
from worker.formats.common import (
    CallRulesFormat,
    add_results,
    argument_schemas,
    call_from_value,
    drop_thinking,
    ordered_arguments,
    read_calls,
    tool_name,
)
from worker.grammar import GrammarBuilder, literal, raw_text, rule_name, text_without

OPEN = "<|tool_call>call:"
CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
_THOUGHT = re.compile(r"<\|channel>.*?(?:<channel\|>|$)", re.DOTALL)
_KEY = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*:")


def _to_json(text: str, i: int) -> tuple[str, int] | None:
    """Gemma notation from the ``{`` at i to its matching ``}``, as JSON text, and where it ends;
    None when the text ends first."""
    out: list[str] = []
    depth = 0
    expect_key = False
    while i < len(text):
        if text.startswith(QUOTE, i):
            end = text.find(QUOTE, i + len(QUOTE))
            if end == -1:
                return None
            out.append(json.dumps(text[i + len(QUOTE) : end], ensure_ascii=False))
            i = end + len(QUOTE)
            expect_key = False
            continue
        if expect_key:
            m = _KEY.match(text, i)
            if m:
                out.append(json.dumps(m.group(1)) + ":")
                i = m.end()
                expect_key = False
                continue
        c = text[i]
        out.append(c)
        i += 1
        if c in "{[":
            depth += 1
            expect_key = c == "{"
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return "".join(out), i
        elif c == ",":
            expect_key = True  # inside a list the pattern simply does not match
        elif not c.isspace():
            expect_key = False
    return None


def _read_call(text: str, i: int, n: int, out: ParsedOutput) -> int | None:
    brace = text.find("{", i)
    converted = _to_json(text, brace) if brace != -1 else None
    if converted is None:
        out.truncated_call = True
        out.errors.append(f"tool call {n} is incomplete: the output ended inside it")
        return None
    name = text[i:brace].strip()
    body, pos = converted
    try:
        add_results(out, [call_from_value({"name": name, "arguments": jsonish.loads(body)}, n)])
    except jsonish.JsonishError as e:
        out.errors.append(f"tool call {n} ({name}): arguments are not readable: {e}")
    rest = len(text) - len(text[pos:].lstrip())
    return rest + len(CLOSE) if text.startswith(CLOSE, rest) else pos


def _write(value: Any) -> str:
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_write(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_write(v) for v in value) + "]"
    return json.dumps(value)


class Gemma4Format(CallRulesFormat):
    name = "gemma4"
    trigger = "<|tool_call>"

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        try:
            text = text if isinstance(text, str) else str(text)
            return read_calls(drop_thinking(_THOUGHT.sub("", text)), OPEN, _read_call)
        except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
            return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return "".join(f"{OPEN}{c.name}{_write(c.arguments)}{CLOSE}" for c in calls)

    # -- grammar

    def _any_value(self, b: GrammarBuilder) -> str:
        text = b.add("gemma-string", f"{literal(QUOTE)} {text_without(b, QUOTE, 'gemma-text')} {literal(QUOTE)}")
        number = b.primitive("number")
        pair = '[A-Za-z_] [A-Za-z0-9_]* ":" gemma-value'
        b.add(
            "gemma-value",
            f'{text} | {number} | "true" | "false" | "null" | "{{" ({pair} ("," {pair})*)? "}}" '
            '| "[" (gemma-value ("," gemma-value)*)? "]"',
        )
        return "gemma-value"

    def _value(self, b: GrammarBuilder, schema: Any) -> str:
        kind = schema.get("type") if isinstance(schema, dict) else None
        enum = schema.get("enum") if isinstance(schema, dict) else None
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            return "(" + " | ".join(literal(QUOTE + v + QUOTE) for v in enum) + ")"
        if kind == "string":
            return f"{literal(QUOTE)} {raw_text(b, QUOTE, schema, 'gemma-text')} {literal(QUOTE)}"
        if kind in ("integer", "number"):
            return b.primitive(kind)
        if kind == "boolean":
            return '("true" | "false")'
        return self._any_value(b)

    def tool_call_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        props, required = argument_schemas(tool)
        items = [(f"{literal(k + ':')} {self._value(b, props[k])}", k in required) for k in sorted(props)]
        body = ordered_arguments(b, rule_name(tool_name(tool)), items, ",")
        return f"{literal(OPEN + tool_name(tool) + '{')} {body} {literal('}' + CLOSE)}"

    def calls_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition], many: bool) -> str:
        one = self.one_call_rule(b, tools)
        return b.add("tool-calls", f"{one} {one}*" if many else one)


FORMAT = Gemma4Format()
