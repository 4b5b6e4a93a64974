"""Tool calls as XML-like markup, one element per argument: Qwen3-Coder, GLM, MiniMax, DeepSeek DSML.

``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``
and its cousins differ only in their markup, so a family's module configures ``XmlCallFormat``
with templates for writing (``{name}``, ``{key}``, ``{string}`` placeholders) and regexes for
reading. A value is plain text: a string argument is written raw, anything else as JSON. The
parser keeps a value's text untouched unless it reads as a JSON number, boolean, null, object or
array (or the markup says it is not a string, as DSML's ``string="false"`` does); it never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, PartialCall, ToolDefinition
from worker.formats.common import (
    CallRulesFormat,
    add_results,
    argument_schemas,
    call_from_value,
    drop_thinking,
    join_content,
    text_value,
    tool_name,
)
from worker.grammar import GrammarBuilder, literal, raw_text, rule_name

_PLACEHOLDER = re.compile(r"\{(name|index|key|string|type)\}")
# Kimi K3 names a value's JSON type in the markup: only "string" is raw text.
_IS_STRING = {
    "string": "true",
    "number": "false",
    "boolean": "false",
    "null": "false",
    "object": "false",
    "array": "false",
}
_SCHEMA_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}
_SCHEMA_TYPES |= {"object": "object", "array": "array"}
_ANY_TYPE = '("number" | "boolean" | "null" | "object" | "array")'


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def _fill(template: str, values: dict[str, str], spell: Callable[[str], str], sep: str = "") -> str:
    """A markup template with its placeholders filled: for writing (``spell=str``: values are
    text), or as GBNF (``spell=literal``: values are GBNF, the template's text becomes literals)."""
    parts = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        if m.start() > pos:
            parts.append(spell(template[pos : m.start()]))
        parts.append(values.get(m.group(1), spell(m.group(0))))
        pos = m.end()
    if pos < len(template) or not parts:
        parts.append(spell(template[pos:]))
    return sep.join(parts)


class XmlCallFormat(CallRulesFormat):
    """Calls as an element per argument; a family's module sets the class attributes below."""

    # reading
    call_head: re.Pattern[str] = re.compile(r"(?!)")  # a call's opening, group "name"
    param_head: re.Pattern[str] = re.compile(r"(?!)")  # an argument's opening, group "key" (and "string")
    value_end = ""  # what ends a value
    call_end = ""  # what ends a call
    trim_newline = False  # values are written on their own line: one newline each side is markup
    # writing
    section_open = ""
    section_close = ""
    call_open = ""  # with {name} (and {index}: the call's number from 1)
    param_open = ""  # with {key} (and {string}: "true" or "false", or {type}: the value's JSON type)
    param_close = ""
    call_close = ""
    separator = "\n"
    noise: tuple[str, ...] = ()

    # -- parsing

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        try:
            return self._read(drop_thinking(text if isinstance(text, str) else str(text)))
        except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
            return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])

    def _read(self, text: str) -> ParsedOutput:
        out = ParsedOutput(content="")
        pieces: list[str] = []
        pos = 0
        while True:
            m = self.call_head.search(text, pos)
            if m is None:
                pieces.append(text[pos:])
                break
            pieces.append(text[pos : m.start()])
            n = len(out.tool_calls) + len(out.errors) + 1
            name = m.group("name").strip()
            after = self._one_call(text, m.end(), name, n, out)
            if after is None:
                break
            pos = after
        out.content = join_content(pieces, self.noise)
        return out

    def _one_call(self, text: str, i: int, name: str, n: int, out: ParsedOutput) -> int | None:
        """Read the arguments from i to the call's end; return where to go on (None: the end)."""
        args: dict[str, Any] = {}
        while True:
            k = len(text) - len(text[i:].lstrip())
            if text.startswith(self.call_end, k):
                add_results(out, [call_from_value({"name": name, "arguments": args}, n)])
                return self._skip(text, k + len(self.call_end), self.section_close)
            pm = self.param_head.match(text, k)
            end = text.find(self.value_end, pm.end()) if pm else -1
            if pm is None or end == -1:
                if pm is not None or not text[k:].strip() or self._cut_in_markup(text[k:]):
                    out.truncated_call = True
                    out.errors.append(f"tool call {n} ({name}) is incomplete: the output ended inside it")
                    return None
                out.errors.append(f"tool call {n} ({name}): unexpected text where an argument or its end belongs")
                return k
            args[pm.group("key").strip()] = self.value(text[pm.end() : end], pm)
            i = end + len(self.value_end)

    def partial_calls(self, text: str) -> list[PartialCall]:
        """A call's name as soon as its head is written; its arguments, which the markup gives
        element by element and as text, once the call is complete."""
        out: list[PartialCall] = []
        pos: int | None = 0
        while pos is not None:
            m = self.call_head.search(text, pos)
            if m is None or m.end() >= len(text):  # a name may still be growing at the very end
                break
            name = m.group("name").strip()
            read = ParsedOutput(content="")
            pos = self._one_call(text, m.end(), name, 1, read)
            if not read.tool_calls:
                out.append(PartialCall(name, "", False))
                break
            out.append(PartialCall(name, json.dumps(read.tool_calls[0].arguments, ensure_ascii=False), True))
        return out

    def _cut_in_markup(self, rest: str) -> bool:
        rest = rest.strip()
        return any(m.startswith(rest) for m in (self.call_end, self.param_open.split("{", 1)[0]) if m)

    @staticmethod
    def _skip(text: str, i: int, mark: str) -> int:
        k = len(text) - len(text[i:].lstrip())
        return k + len(mark) if mark and text.startswith(mark, k) else i

    def value(self, raw: str, m: re.Match[str]) -> Any:
        if self.trim_newline:
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
        kind = m.groupdict().get("string") or _IS_STRING.get(m.groupdict().get("type") or "")
        if kind == "true":
            return raw
        if kind == "false":
            try:
                return jsonish.loads(raw)
            except jsonish.JsonishError:
                return raw
        return text_value(raw)

    # -- rendering

    def _param(self, key: str, value: Any) -> str:
        is_string = isinstance(value, str)
        kind = {"key": key, "string": "true" if is_string else "false", "type": _json_type(value)}
        head = _fill(self.param_open, kind, str)
        return f"{head}{value if is_string else jsonish.dumps(value)}{self.param_close}"

    def render_call(self, call: ToolCall, index: int = 1) -> str:
        params = "".join(self._param(k, v) for k, v in call.arguments.items())
        return f"{_fill(self.call_open, {'name': call.name, 'index': str(index)}, str)}{params}{self.call_close}"

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        body = self.separator.join(self.render_call(c, i) for i, c in enumerate(calls, 1))
        return f"{self.section_open}{body}{self.section_close}"

    # -- grammar

    def _param_gbnf(self, b: GrammarBuilder, key: str, schema: Any, base: str) -> str:
        is_string = isinstance(schema, dict) and schema.get("type") == "string"
        enum = schema.get("enum") if isinstance(schema, dict) else None
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            value, is_string = "(" + " | ".join(literal(v) for v in enum) + ")", True
        elif is_string:
            value = raw_text(b, self.value_end, schema, "text-value")
        else:
            value = b.schema(schema, base)
        kind = schema.get("type") if isinstance(schema, dict) and not is_string else ("string" if is_string else None)
        type_gbnf = literal(_SCHEMA_TYPES.get(kind, "")) if kind in _SCHEMA_TYPES else _ANY_TYPE
        subs = {"key": literal(key) if key else "[A-Za-z0-9_.-]+", "string": literal("true" if is_string else "false")}
        head = _fill(self.param_open, {**subs, "type": type_gbnf}, literal, " ")
        return f"{head} {value} {literal(self.param_close)}"

    def tool_call_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        name = tool_name(tool)
        base = rule_name(name)
        props, required = argument_schemas(tool)
        parts = []
        for key, sub in props.items():
            rule = b.add(f"{base}-{rule_name(key)}-param", self._param_gbnf(b, key, sub, f"{base}-{key}"))
            parts.append(rule if key in required else f"{rule}?")
        if not props:
            parts.append(b.add("any-param", self._param_gbnf(b, "", {}, "any")) + "*")
        head = _fill(self.call_open, {"name": literal(name), "index": "[0-9]{1,3}"}, literal, " ")
        return " ".join([head, *parts, literal(self.call_close)])

    def calls_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition], many: bool) -> str:
        one = self.one_call_rule(b, tools)
        sep = f"{literal(self.separator)} " if self.separator else ""
        body = one + (f" ({sep}{one})*" if many else "")
        so = f"{literal(self.section_open)} " if self.section_open else ""
        sc = f" {literal(self.section_close)}" if self.section_close else ""
        return b.add("tool-calls", f"{so}{body}{sc}")
