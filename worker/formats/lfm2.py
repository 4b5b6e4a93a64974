"""Liquid LFM2 and LFM2.5: Python-style calls, ``<|tool_call_start|>[NAME(ARG=VALUE, ...), ...]<|tool_call_end|>``.

The list is read as a Python expression (``ast``), never run; each value is read leniently
(worker/jsonish.py), so Python's ``'text'``, ``True`` and ``None`` and JSON's ``"text"``, ``true``
and ``null`` are both understood. Calls are written, and constrained, with JSON values.
"""

from __future__ import annotations

import ast
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
from worker.grammar import GrammarBuilder, literal, rule_name

START = "<|tool_call_start|>"
END = "<|tool_call_end|>"


def _read_list(body: str, n: int) -> list[ToolCall | str] | None:
    """The calls in a Python list expression; None when it is not one (yet)."""
    try:
        tree = ast.parse(body.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    items = tree.elts if isinstance(tree, ast.List) else [tree]
    results: list[ToolCall | str] = []
    for i, item in enumerate(items):
        if not isinstance(item, ast.Call) or item.args:
            results.append(f"tool call {n + i} must be written NAME(ARG=VALUE, ...)")
            continue
        name = ast.get_source_segment(body.strip(), item.func) or ""
        args: dict[str, Any] = {}
        for kw in item.keywords:
            segment = ast.get_source_segment(body.strip(), kw.value) or ""
            try:
                args[kw.arg or ""] = jsonish.loads(segment)
            except jsonish.JsonishError as e:
                results.append(f"tool call {n + i} ({name}): the value of {kw.arg} is not a literal: {e}")
                break
        else:
            results.append(call_from_value({"name": name, "arguments": args}, n + i))
    return results


def _read_call(text: str, j: int, n: int, out: ParsedOutput) -> int | None:
    # An end tag inside a string value ends nothing: try each end tag until the list reads.
    end = text.find(END, j)
    while end != -1 and _read_list(text[j:end], n) is None:
        end = text.find(END, end + 1)
    results = _read_list(text[j:] if end == -1 else text[j:end], n)
    if results is None:
        out.truncated_call = True
        out.errors.append(f"tool call {n} is incomplete: the output ended before {END}")
        return None
    add_results(out, results)
    return None if end == -1 else end + len(END)


class Lfm2Format(CallRulesFormat):
    name = "lfm2"
    trigger = START

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        try:
            return read_calls(drop_thinking(text if isinstance(text, str) else str(text)), START, _read_call)
        except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
            return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        written = []
        for c in calls:
            args = ", ".join(f"{k}={jsonish.dumps(v)}" for k, v in c.arguments.items())
            written.append(f"{c.name}({args})")
        return f"{START}[{', '.join(written)}]{END}"

    def tool_call_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        base = rule_name(tool_name(tool))
        props, required = argument_schemas(tool)
        items = [(f"{literal(k + '=')} {b.schema(sub, f'{base}-{k}')}", k in required) for k, sub in props.items()]
        return f'{literal(tool_name(tool) + "(")} {ordered_arguments(b, base, items, ", ")} ")"'

    def calls_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition], many: bool) -> str:
        one = self.one_call_rule(b, tools)
        more = f' (", " {one})*' if many else ""
        return b.add("tool-calls", f"{literal(START + '[')} {one}{more} {literal(']' + END)}")


FORMAT = Lfm2Format()
