"""Functionary v2: tools as a TypeScript ``namespace functions``, calls as recipients.

The generation prompt ends with ``<|from|>assistant\\n<|recipient|>``, so the model's output
starts with a recipient: ``all`` for plain content, or a tool name followed by
``\\n<|content|>{args}``. Further messages repeat ``<|from|>assistant\\n<|recipient|>``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition
from worker.formats.common import call_from_value, tool_name, tool_params
from worker.grammar import GrammarBuilder, literal, rule_name

FROM = "<|from|>"
RECIPIENT = "<|recipient|>"
CONTENT = "<|content|>"
STOP = "<|stop|>"
START = f"{FROM}assistant\n{RECIPIENT}"
_CALL_HEAD = f"\n{CONTENT}"  # between the recipient and the arguments
_PLAIN = f"all\n{CONTENT}"  # the recipient of plain content


# ---------------------------------------------------------------- the TypeScript prompt


def ts_type(schema: Any, depth: int = 0) -> str:
    """A TypeScript type for a JSON schema, as functionary was trained to read it."""
    if not isinstance(schema, dict) or depth > 8:
        return "any"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return " | ".join(ts_type(s, depth + 1) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(ts_type({**schema, "type": k}, depth + 1) for k in kind)
    if kind in ("integer", "number"):
        return "number"
    if kind in ("string", "boolean", "null"):
        return kind
    if kind == "array":
        return f"{ts_type(schema.get('items'), depth + 1)}[]"
    if kind == "object" or isinstance(schema.get("properties"), dict):
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return "object"
        return "{\n" + _ts_fields(schema, depth + 1) + "\n}"
    return "any"


def _ts_fields(schema: dict, depth: int) -> str:
    required = schema.get("required")
    required = required if isinstance(required, list) else []
    lines = []
    props = schema.get("properties") or {}
    for key, sub in props.items():
        desc = sub.get("description") if isinstance(sub, dict) else None
        if isinstance(desc, str) and desc:
            lines.append(f"// {desc}")
        opt = "" if key in required else "?"
        lines.append(f"{key}{opt}: {ts_type(sub, depth)},")
    if lines:
        lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines)


def namespace_prompt(tools: Sequence[ToolDefinition]) -> str:
    out = ["// Supported function definitions that should be called when necessary.", "namespace functions {"]
    for i, tool in enumerate(tools):
        fn = tool.get("function") or tool
        if i:
            out.append("")
        if isinstance(fn.get("description"), str) and fn["description"]:
            out.append(f"// {fn['description']}")
        params = tool_params(tool)
        if params.get("properties"):
            out.append(f"type {tool_name(tool)} = (_: {{\n{_ts_fields(params, 1)}\n}}) => any;")
        else:
            out.append(f"type {tool_name(tool)} = () => any;")
    out.append("} // namespace functions")
    return "\n".join(out)


# ---------------------------------------------------------------- the parser


def _read_segment(seg: str, last: bool, n: int, out: ParsedOutput, pieces: list[str]) -> None:
    """One message: ``NAME\\n<|content|>BODY``. Content for recipient all, else a call."""
    k = seg.find(CONTENT)
    if k == -1:
        head = seg.strip()
        # Cut while writing the recipient, or a model that ignored the format and just talked.
        if last and head and head != "all" and "\n" not in head and " " not in head and len(head) <= 64:
            out.truncated_call = True
            out.errors.append(f"tool call {n} ({head}) is incomplete: the output ended before <|content|>")
        elif head != "all":
            pieces.append(seg)
        return
    recipient = seg[:k].strip()
    body = seg[k + len(CONTENT) :]
    if recipient in ("all", ""):
        pieces.append(body)
        return
    stripped = jsonish.strip_fence(body)
    if not stripped:
        args: Any = {}
    elif stripped[0] in "{[" and not jsonish.scan_value(stripped, 0).complete and last:
        out.truncated_call = True
        out.errors.append(f"tool call {n} ({recipient}) is incomplete: the output ended before its JSON was closed")
        return
    else:
        try:
            args = jsonish.loads(stripped)
        except jsonish.JsonishError as e:
            out.errors.append(f"tool call {n} ({recipient}): arguments are not valid JSON: {e}")
            return
    result = call_from_value({"name": recipient, "arguments": args}, n)
    if isinstance(result, ToolCall):
        out.tool_calls.append(result)
    else:
        out.errors.append(result)


def parse_functionary(text: str) -> ParsedOutput:
    out = ParsedOutput(content="")
    try:
        text = text.split(STOP, 1)[0]  # everything after <|stop|> is past the end of the turn
        segments = text.split(FROM)
        first = segments[0]
        if first.lstrip().startswith(RECIPIENT):
            first = first.lstrip()[len(RECIPIENT) :]
        rest = []
        for seg in segments[1:]:
            # "<|from|>assistant\n<|recipient|>NAME..." - keep what follows the recipient tag.
            r = seg.find(RECIPIENT)
            rest.append(seg[r + len(RECIPIENT) :] if r != -1 else seg)
        all_segments = ([first] if first.strip() else []) + rest
        pieces: list[str] = []
        for i, seg in enumerate(all_segments):
            _read_segment(seg, i == len(all_segments) - 1, len(out.tool_calls) + len(out.errors) + 1, out, pieces)
        out.content = "\n".join(p.strip() for p in pieces if p.strip())
        return out
    except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
        return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])


# ---------------------------------------------------------------- the format


class FunctionaryV2Format(ToolCallFormat):
    name = "functionary_v2"
    trigger = None  # every message opens with a recipient; there is no tag to wait for
    opens_at_start = True
    stop = (STOP,)

    def system_prompt(self, tools: Sequence[ToolDefinition], variant: str | None = None) -> str:
        return namespace_prompt(tools)

    def _rules(self, b: GrammarBuilder, tools: Sequence[ToolDefinition]) -> tuple[str, str]:
        b.add("start", literal(START))
        alternatives = []
        for tool in tools:
            base = rule_name(tool_name(tool))
            args = b.schema(tool_params(tool), base + "-args")
            head = f"{literal(tool_name(tool))} {literal(_CALL_HEAD)}"
            # Functionary's own grammar (SEED_FUNCTIONARY in tests/unit/test_gbnf.py) puts newlines
            # around the arguments, the chat template none: allow both.
            alternatives.append(b.add(base + "-call", f'{head} "\\n"? {args} "\\n"?'))
        if not alternatives:
            raise ValueError("a tool-call grammar needs at least one tool")
        without = b.add("tool-call-without-start", " | ".join(alternatives))
        return b.add("tool-call", f"start {without}"), without

    def grammar(self, tools: Sequence[ToolDefinition], *, required: bool = False) -> str:
        b = GrammarBuilder()
        call, without = self._rules(b, tools)
        if required:
            b.add("root", f"{without} {call}*")
        else:
            # Text that never writes "<|from|>": a new message can only start through the rules.
            b.add(
                "not-from",
                '([^<] | "<" ([^|] | "|" ([^f] | "f" ([^r] | "r" ([^o] | "o" '
                '([^m] | "m" ([^|] | "|" ([^>])?)?)?)?)?)?)?)',
            )
            b.add("content-without-start", f"{literal(_PLAIN)} not-from*")
            b.add("content", "start content-without-start")
            b.add("root", f"content-without-start content* ({call}+ content*)? | {without} {call}* content*")
        return b.render()

    def call_grammar(self, tools: Sequence[ToolDefinition]) -> str:
        # No trigger: the nearest thing is "the output is calls only".
        return self.grammar(tools, required=True)

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        return parse_functionary(text)

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(f"{START}{c.name}\n{CONTENT}{jsonish.dumps(c.arguments)}" for c in calls)

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        # The template writes "<|from|>NAME\n<|recipient|>all\n<|content|>" around a tool message.
        return content


FORMAT = FunctionaryV2Format()
