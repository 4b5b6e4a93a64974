"""Functionary v3.2: the prompt ends with ``>>>``; each message starts with its recipient:
``NAME\\n{...}`` for a call, ``all\\ntext`` for content, and further messages repeat ``>>>``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, ToolDefinition
from worker.formats.common import (
    CallRulesFormat,
    add_results,
    call_from_value,
    drop_thinking,
    example_call,
    example_prompt,
    join_content,
    tool_name,
    tool_params,
)
from worker.grammar import GrammarBuilder, literal, rule_name

MARK = ">>>"
# A recipient line: where a new message starts (">>>" in content not followed by one is content).
_RECIPIENT = re.compile(r">>>\s*(?P<name>[A-Za-z0-9_.:-]+)[ \t]*\n")
_FIRST = re.compile(r"\s*(?:>>>)?\s*(?P<name>[A-Za-z0-9_.:-]+)[ \t]*\n")
_CUT_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # output cut right after a recipient's name
_NOISE = ("<|eot_id|>", "<|eom_id|>", "<|start_header_id|>assistant<|end_header_id|>")


def _first_recipient(text: str, tool_names: set[str] | None) -> re.Match[str] | None:
    """The recipient the output opens with (the prompt wrote its ``>>>``): ``all`` or a tool.
    Without the marker, a first line is a recipient only if it names an offered tool."""
    m = _FIRST.match(text)
    if m is None:
        return None
    name = m.group("name")
    if name == "all" or tool_names is None or name in tool_names:
        return m
    return None


def _read(text: str, tool_names: set[str] | None) -> ParsedOutput:
    out = ParsedOutput(content="")
    pieces: list[str] = []
    pos = 0
    first = _first_recipient(text, tool_names)
    while True:
        m = first or _RECIPIENT.search(text, pos)
        first = None
        if m is None:
            rest = text[pos:]
            head = rest.strip()
            name = head[len(MARK) :].strip() if head.startswith(MARK) else head
            cut = _CUT_NAME.fullmatch(name) and name != "all"
            if cut and (head.startswith(MARK) or (pos == 0 and tool_names is not None and name in tool_names)):
                out.truncated_call = True
                out.errors.append(
                    f"tool call {len(out.tool_calls) + len(out.errors) + 1} is incomplete: cut after its name"
                )
            elif head not in (MARK, f"{MARK}all"):
                pieces.append(rest)
            break
        pieces.append(text[pos : m.start()])
        name, j = m.group("name"), m.end()
        nxt = _RECIPIENT.search(text, j)
        if name == "all":
            pos = nxt.start() if nxt else len(text)
            pieces.append(text[j:pos])
            continue
        n = len(out.tool_calls) + len(out.errors) + 1
        k = len(text) - len(text[j:].lstrip())
        if k < len(text) and text[k] in "{[":
            scan = jsonish.scan_value(text, k)
            if scan.end is None:
                out.truncated_call = True
                out.errors.append(f"tool call {n} ({name}) is incomplete: the output ended before its JSON was closed")
                break
            body, pos = text[k : scan.end], scan.end
        else:
            pos = nxt.start() if nxt else len(text)
            body = text[k:pos]
        try:
            args = jsonish.loads(body) if body.strip() else {}
        except jsonish.JsonishError as e:
            out.errors.append(f"tool call {n} ({name}): arguments are not valid JSON: {e}")
            continue
        add_results(out, [call_from_value({"name": name, "arguments": args}, n)])
    out.content = join_content(pieces, _NOISE)
    return out


class FunctionaryV32Format(CallRulesFormat):
    name = "functionary_v3_2"
    trigger = None  # every message opens with a recipient; there is no tag to wait for
    opens_at_start = True

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        try:
            return _read(drop_thinking(text if isinstance(text, str) else str(text)), tool_names)
        except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
            return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return MARK.join(f"{c.name}\n{jsonish.dumps(c.arguments)}" for c in calls)

    def system_prompt(self, tools: Sequence[ToolDefinition], variant: str | None = None) -> str:
        return example_prompt(tools, ">>>" + self.render_tool_calls([example_call()]))

    def tool_call_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        args = b.schema(tool_params(tool), rule_name(tool_name(tool)) + "-args")
        return f"{literal(tool_name(tool) + chr(10))} {args}"

    def calls_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition], many: bool) -> str:
        one = self.one_call_rule(b, tools)
        return b.add("tool-calls", f"{one} ({literal(MARK)} {one})*" if many else one)

    def grammar(self, tools: Sequence[ToolDefinition], *, required: bool = False) -> str:
        if required:
            return super().grammar(tools, required=True)
        # Without a trigger the grammar covers the whole output: plain content is the "all" message.
        b = GrammarBuilder()
        calls = self.calls_rule(b, tools, True)
        b.add("content", '"all\\n" ([^>] | ">" [^>])*')
        b.add("root", f"content ({literal(MARK)} {calls})? | {calls}")
        return b.render()


FORMAT = FunctionaryV32Format()
