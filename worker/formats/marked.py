"""Tool calls as JSON after a marker: what most template families write, in two shapes.

- named: a head that carries the tool's name, then the arguments as JSON, then an optional tail:
  ``[TOOL_CALLS]NAME[ARGS]{...}``, ``<function=NAME>{...}</function>``, DeepSeek's and Kimi's
  markers, gpt-oss's ``to=functions.NAME ... <|message|>{...}<|call|>``;
- listed: a head, then one call object or a JSON array of them: ``[TOOL_CALLS][{"name": ...}]``,
  ``<|tool_call|>[...]``, Command R's actions, Llama 3's bare ``{"name", "parameters"}``.

A family's module configures ``MarkedJsonFormat`` with its markers (and overrides a hook where its
syntax needs one). The parser finds each head with a regex, scans the JSON after it with the
string-aware scanner (worker/jsonish.py), never touches string contents and never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, PartialCall, ToolDefinition
from worker.formats.common import (
    CallRulesFormat,
    add_results,
    call_from_value,
    calls_from_value,
    drop_thinking,
    join_content,
    tool_name,
    tool_params,
)
from worker.grammar import GrammarBuilder, literal, rule_name

_FENCE = re.compile(r"\s*(?:```[A-Za-z0-9_-]*[ \t]*\n?)?\s*")
_FENCE_CLOSE = re.compile(r"(?:\s*```)?")


class MarkedJsonFormat(CallRulesFormat):
    """Calls as JSON after a head; a family's module sets the class attributes below."""

    head: re.Pattern[str] = re.compile(r"(?!)")  # where a call (named: group "name") or a list starts
    named = True  # the head carries the name and the JSON is the arguments
    open = ""  # written before the name (named) or the JSON (listed)
    mid = ""  # named: written between the name and the arguments
    close = ""  # written after the JSON
    section_open = ""  # written around all calls of a turn
    section_close = ""
    separator = ""  # written between two calls
    noise: tuple[str, ...] = ()  # markup that is dropped from content
    # listed: the keys of a call object, and whether the JSON is an array of them
    name_key = "name"
    args_key = "arguments"
    array = True
    # listed: a head that may match plain JSON (Llama 3's bare object: a head of only blanks or
    # ";"); such JSON is a call only when it names offered tools, else it stays content
    bare = False

    # -- parsing

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        try:
            return self._read(drop_thinking(text if isinstance(text, str) else str(text)), tool_names)
        except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
            return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])

    def _read(self, text: str, tool_names: set[str] | None) -> ParsedOutput:
        out = ParsedOutput(content="")
        pieces: list[str] = []
        pos = 0
        while pos <= len(text):
            m = self.head.search(text, pos)
            if m is None or (m.end() == m.start() and m.start() < pos):
                pieces.append(text[pos:])
                break
            pieces.append(text[pos : m.start()])
            n = len(out.tool_calls) + len(out.errors) + 1
            name = self.head_name(m)
            j = _FENCE.match(text, m.end()).end()  # type: ignore[union-attr]
            if j >= len(text):
                out.truncated_call = True
                out.errors.append(f"tool call {n} is incomplete: the output ended before its JSON")
                break
            if text[j] not in "{[":
                if self.bare and not m.group(0).strip(" \t\n;"):
                    pieces.append(text[m.start() : j + 1])
                    pos = j + 1
                    continue
                what = f" ({name})" if name else ""
                out.errors.append(f"tool call {n}{what}: expected JSON after {m.group(0).strip()!r}")
                pos = max(j, m.end() + 1)
                continue
            scan = jsonish.scan_value(text, j, stops=self.stops())
            if scan.end is None and scan.stopped_at is None:
                out.truncated_call = True
                out.errors.append(f"tool call {n} is incomplete: the output ended before its JSON was closed")
                break
            end = scan.end if scan.end is not None else scan.stopped_at
            assert end is not None
            body = text[j:end]
            results = self.read_json(body, name, n)
            if self.bare and not m.group(0).strip(" \t\n;") and not _names_offered(results, tool_names):
                pieces.append(body)
            else:
                add_results(out, results)
            pos = _FENCE_CLOSE.match(text, end).end()  # type: ignore[union-attr]
            pos = self.skip_close(text, pos)
        out.content = self.clean_content(join_content(pieces, self.noise))
        return out

    # -- streaming

    def partial_calls(self, text: str) -> list[PartialCall]:
        """Named calls stream: the name once the head is written and the JSON has begun (a head
        may match before the whole name is written), then the arguments JSON as written. Listed
        calls come whole, once their JSON is closed."""
        if not self.named:  # the parser reads a listed call only once its JSON is closed
            return [
                PartialCall(c.name, json.dumps(c.arguments, ensure_ascii=False), True)
                for c in self.parse(text).tool_calls
            ]
        out: list[PartialCall] = []
        pos = 0
        while True:
            m = self.head.search(text, pos)
            if m is None:
                return out
            j = _FENCE.match(text, m.end()).end()  # type: ignore[union-attr]
            if j >= len(text) or text[j] not in "{[":
                return out
            scan = jsonish.scan_value(text, j, stops=self.stops())
            if scan.end is None:
                out.append(PartialCall(self.head_name(m), text[j:].rstrip(), False))
                return out
            out.append(PartialCall(self.head_name(m), text[j : scan.end], True))
            pos = scan.end

    def stops(self) -> tuple[str, ...]:
        """Markers that end broken JSON early, for a precise error rather than a truncated call."""
        return tuple(s for s in (self.close.strip(), self.section_close.strip()) if s.startswith("<"))

    def head_name(self, m: re.Match[str]) -> str:
        """The name a head carries: its first non-empty group named name, name2, ..."""
        return next((v.strip() for k, v in m.groupdict().items() if k.startswith("name") and v), "")

    def skip_close(self, text: str, pos: int) -> int:
        close = self.close.replace("```", "").strip()  # a closing fence was read with the JSON
        k = len(text) - len(text[pos:].lstrip())
        if close and text.startswith(close, k):
            return k + len(close)
        return pos

    def clean_content(self, content: str) -> str:
        return content

    def read_json(self, body: str, name: str, n: int) -> list[ToolCall | str]:
        try:
            value = jsonish.loads(body)
        except jsonish.JsonishError as e:
            what = f" ({name})" if name else ""
            return [f"tool call {n}{what} is not valid JSON: {e}"]
        if name:  # a head that names the tool: the JSON is its arguments
            return [call_from_value({"name": name, "arguments": value}, n)]
        items = value if isinstance(value, list) else [value]
        return calls_from_value(
            [self.normalize(v) for v in items] if isinstance(value, list) else self.normalize(value), n
        )

    def normalize(self, value: Any) -> Any:
        """A listed call object in the family's own keys, as {"name", "arguments"}."""
        if isinstance(value, dict) and self.name_key in value and self.name_key != "name":
            return {"name": value.get(self.name_key), "arguments": value.get(self.args_key)}
        return value

    # -- rendering

    def render_call(self, call: ToolCall, i: int) -> str:
        if self.named:
            return f"{self.open}{call.name}{self.mid}{jsonish.dumps(call.arguments)}{self.close}"
        return f"{self.open}{jsonish.dumps(self.call_object(call, i))}{self.close}"

    def call_object(self, call: ToolCall, i: int) -> dict[str, Any]:
        return {self.name_key: call.name, self.args_key: call.arguments}

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        if not self.named and self.array:
            objects = [self.call_object(c, i) for i, c in enumerate(calls)]
            return f"{self.section_open}{self.open}{jsonish.dumps(objects)}{self.close}{self.section_close}"
        body = self.separator.join(self.render_call(c, i) for i, c in enumerate(calls))
        return f"{self.section_open}{body}{self.section_close}"

    # -- grammar

    def open_gbnf(self, name: str) -> str:
        """GBNF for the text before the arguments of a named call of this tool."""
        return literal(f"{self.open}{name}{self.mid}")

    def object_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        """GBNF for one listed call object of this tool, in the family's keys (rules go into b)."""
        base = rule_name(tool_name(tool)) + "-call"
        name = b.add(base + "-name", literal(json.dumps(tool_name(tool), ensure_ascii=False)) + " space")
        args = b.schema(tool_params(tool), base + "-args")
        kv_name = f"{literal(chr(34) + self.name_key + chr(34))} space {literal(':')} space {name}"
        kv_args = f"{literal(chr(34) + self.args_key + chr(34))} space {literal(':')} space {args}"
        return f'"{{" space {kv_name} "," space {kv_args} "}}" space'

    def tool_call_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        if not self.named:
            return self.object_gbnf(b, tool)
        args = b.schema(tool_params(tool), rule_name(tool_name(tool)) + "-args")
        tail = f" {literal(self.close)}" if self.close else ""
        return f"{self.open_gbnf(tool_name(tool))} {args}{tail}"

    def calls_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition], many: bool) -> str:
        one = self.one_call_rule(b, tools)
        if self.named or not self.array:
            head = "" if self.named or not self.open else f"{literal(self.open)} "
            tail = "" if self.named or not self.close else f" {literal(self.close)}"
            sep = f"{literal(self.separator)} " if self.separator else ""
            body = f"{head}{one}{tail}" + (f" ({sep}{head}{one}{tail})*" if many else "")
        else:
            more = f' ("," space {one})*' if many else ""
            tail = f" {literal(self.close)}" if self.close else ""
            body = f'{literal(self.open)} "[" space {one}{more} "]"{tail}'
        so = f"{literal(self.section_open)} " if self.section_open else ""
        sc = f" {literal(self.section_close)}" if self.section_close else ""
        return b.add("tool-calls", f"{so}{body}{sc}")


def _names_offered(results: Sequence[ToolCall | str], tool_names: set[str] | None) -> bool:
    """Whether bare JSON is a call: every entry a call, of an offered tool (when known)."""
    if not results or not all(isinstance(r, ToolCall) for r in results):
        return False
    return tool_names is None or all(r.name in tool_names for r in results if isinstance(r, ToolCall))
