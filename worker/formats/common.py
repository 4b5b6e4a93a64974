"""What the tool-call formats share: reading a tool definition, reading a decoded call object,
and listing tools in a prompt."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from toolq.wire.protocol import FunctionCall, ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition
from worker.grammar import GrammarBuilder, literal, text_without


def tools_block(tools: Sequence[ToolDefinition]) -> str:
    """Tools as the Hermes and thoughtful-steps prompts list them: each definition as indented JSON."""
    return "\n".join(json.dumps(t, indent=2, ensure_ascii=False) for t in tools)


def tool_name(tool: ToolDefinition) -> str:
    return (tool.get("function") or tool).get("name", "")


def argument_schemas(tool: ToolDefinition) -> tuple[dict[str, Any], list[str]]:
    """The tool's argument schemas by name, and the names it requires."""
    params = tool_params(tool)
    props = params.get("properties")
    required = params.get("required")
    return (props if isinstance(props, dict) else {}), (required if isinstance(required, list) else [])


def tool_params(tool: ToolDefinition) -> dict:
    """The tool's parameters schema; always an object schema (arguments are an object)."""
    params = (tool.get("function") or tool).get("parameters")
    params = params if isinstance(params, dict) else {}
    return params if params.get("type") == "object" else {**params, "type": "object"}


def call_from_value(value: Any, n: int) -> ToolCall | str:
    """A ToolCall from one decoded call object, or a readable error for call number n.

    Accepts {"name", "arguments"}, "parameters" for "arguments", arguments as a JSON string,
    null or missing arguments, and the OpenAI shape {"type": "function", "function": {...}}.
    Any "id" the model wrote is ignored: ids are ours, so a copied id can never collide.
    """
    if not isinstance(value, dict):
        return f'tool call {n} must be a JSON object with "name" and "arguments", not {type(value).__name__}'
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'tool call {n} has no "name": write {{"name": <function-name>, "arguments": <args-dict>}}'
    name = name.strip()
    if "arguments" in value:
        args = value["arguments"]
    else:
        args = value.get("parameters")
    if args is None:
        args = {}
    if isinstance(args, str):
        if not args.strip():
            args = {}
        else:
            try:
                args = jsonish.loads(args)
            except jsonish.JsonishError as e:
                return f"tool call {n} ({name}): arguments is a string that is not valid JSON: {e}"
    if not isinstance(args, dict):
        return f"tool call {n} ({name}): arguments must be a JSON object, not {type(args).__name__}"
    try:
        return ToolCall(function=FunctionCall(name=name, arguments=args))
    except ValidationError as e:
        first = e.errors()[0]
        return f"tool call {n} ({name[:40]}): {first.get('msg', 'invalid')}"


def calls_from_value(value: Any, n: int) -> list[ToolCall | str]:
    """One decoded block may hold one call or a list of them."""
    if isinstance(value, list):
        if not value:
            return [f"tool call {n} is an empty list"]
        return [call_from_value(v, n + i) for i, v in enumerate(value)]
    return [call_from_value(value, n)]


# ---------------------------------------------------------------- shared by the template families' formats

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def drop_thinking(text: str) -> str:
    """The text without its ``<think>`` drafts: a call drafted while thinking is not a call.

    A lone ``</think>`` (the template opened the block in the prompt) ends thinking that began
    at the start; an unclosed ``<think>`` runs to the end.
    """
    close = text.find(THINK_CLOSE)
    if close != -1 and THINK_OPEN not in text[:close]:
        text = text[close + len(THINK_CLOSE) :]
    out = []
    pos = 0
    while True:
        start = text.find(THINK_OPEN, pos)
        if start == -1:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:start])
        end = text.find(THINK_CLOSE, start)
        if end == -1:
            return "".join(out)
        pos = end + len(THINK_CLOSE)


def join_content(pieces: Sequence[str], noise: Sequence[str] = ()) -> str:
    """Content pieces joined, without the format's own markup (section markers, end tokens)."""
    cleaned = []
    for piece in pieces:
        for mark in noise:
            piece = piece.replace(mark, "")
        if piece.strip():
            cleaned.append(piece.strip())
    return "\n".join(cleaned)


def example_prompt(tools: Sequence[ToolDefinition], example: str) -> str:
    """The system prompt of a format whose template does not list the tools itself."""
    return (
        "You can call the following tools. Call a tool when it helps to answer; "
        "don't make assumptions about the values to pass.\n"
        f"{tools_block(tools)}\n\nTo call a tool, write:\n{example}"
    )


def example_call() -> ToolCall:
    return ToolCall(function=FunctionCall(name="tool_name", arguments={"argument": "value"}))


def _not_json(name: str) -> Any:
    # Python's json reads NaN and -Infinity, which no JSON encoder may send on: such text stays text
    raise ValueError(f"{name} is not JSON")


def text_value(raw: str) -> Any:
    """A parameter value written as plain text (the XML-like formats): a JSON number, boolean,
    null, object or array when it reads as one, else the text itself, untouched. (Which of the
    two the tool wanted is in its schema, which parsers are not given: a string argument whose
    text reads as JSON comes back decoded.)"""
    s = raw.strip()
    if not s or s[0] == '"' or not (s[0] in "{[-tfn" or s[0].isdigit()):
        return raw
    try:
        # Containers may come in Python's spelling (templates that print a list with ``string``).
        value = jsonish.loads(s) if s[0] in "{[" else json.loads(s, parse_constant=_not_json)
    except ValueError:
        return raw
    return raw if isinstance(value, str) else value


# Reads the call whose text starts at i (just past its opening mark) into out, as call number n;
# returns where the text goes on, or None when nothing after it is to be read.
ReadCall = Callable[[str, int, int, ParsedOutput], "int | None"]


def read_calls(text: str, opening: str, read_call: ReadCall) -> ParsedOutput:
    """A parser for calls that each open with the literal ``opening``: what lies between them is
    content, each call is ``read_call``'s."""
    out = ParsedOutput(content="")
    pieces: list[str] = []
    pos: int | None = 0
    while pos is not None:
        k = text.find(opening, pos)
        if k == -1:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos:k])
        pos = read_call(text, k + len(opening), len(out.tool_calls) + len(out.errors) + 1, out)
    out.content = join_content(pieces)
    return out


def add_results(out: ParsedOutput, results: Sequence[ToolCall | str]) -> None:
    """Calls and errors into a ParsedOutput."""
    for r in results:
        if isinstance(r, ToolCall):
            out.tool_calls.append(r)
        else:
            out.errors.append(r)


class CallRulesFormat(ToolCallFormat):
    """A format whose grammars come from one rule for a turn's calls (``calls_rule``): the calls
    alone (required, or no trigger to wait for), or free text that cannot write the trigger and
    then the calls."""

    def calls_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition], many: bool) -> str:
        raise NotImplementedError

    def tool_call_gbnf(self, b: GrammarBuilder, tool: ToolDefinition) -> str:
        """GBNF for one call of this tool (rules it needs go into ``b``)."""
        raise NotImplementedError

    def one_call_rule(self, b: GrammarBuilder, tools: Sequence[ToolDefinition]) -> str:
        """The rule for one call of any of the tools."""
        if not tools:
            raise ValueError("a tool-call grammar needs at least one tool")
        calls = [b.add(tool_name(t) + "-call", self.tool_call_gbnf(b, t)) for t in tools]
        return b.add("one-call", " | ".join(calls))

    def system_prompt(self, tools: Sequence[ToolDefinition], variant: str | None = None) -> str:
        return example_prompt(tools, self.render_tool_calls([example_call()]))

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return content  # these families' templates mark tool results themselves

    def _grammar(self, tools: Sequence[ToolDefinition], *, many: bool, required: bool) -> str:
        b = GrammarBuilder()
        rule = self.calls_rule(b, tools, many)
        if required or not self.trigger:
            b.add("root", rule)
        else:
            b.add("root", f"{text_without(b, self.trigger, 'content')} {rule}?")
        return b.render()

    def grammar(self, tools: Sequence[ToolDefinition], *, required: bool = False) -> str:
        return self._grammar(tools, many=True, required=required)

    def call_grammar(self, tools: Sequence[ToolDefinition]) -> str:
        return self._grammar(tools, many=False, required=True)


def ordered_arguments(b: GrammarBuilder, base: str, items: Sequence[tuple[str, bool]], sep: str) -> str:
    """GBNF for arguments written in a fixed order with ``sep`` between two of them; ``items``
    are (the GBNF of one argument, whether it is required). Optional ones may be left out
    anywhere. Returns a rule name, or ``""`` when there are no arguments."""
    start = rest = ""  # the arguments from i on: with none before them, and after one
    for i in range(len(items) - 1, -1, -1):
        item, required = items[i]
        after = f" {rest}" if rest else ""
        with_sep = f"{literal(sep)} {item}"
        rest = b.add(f"{base}-rest-{i}", f"{with_sep}{after}" if required else f"({with_sep})?{after}")
        if required:
            start = b.add(f"{base}-start-{i}", f"{item}{after}")
        else:
            start = b.add(f"{base}-start-{i}", f"{item}{after} | {start}" if start else f"({item}{after})?")
    return start
