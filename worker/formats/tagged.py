"""Tool calls as JSON between tags: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

What the Hermes format (worker/formats/hermes.py) and its Mixtral spelling (worker/formats/mixtral.py)
share: the prompts that teach the tags, the parser, the grammar and the rendering, in
``TaggedCallFormat``. Results go back as ``<tool_response>...</tool_response>``.

The parser is where other projects hurt users, so it is careful rather than clever: it scans the
JSON after each opening tag with a string-aware scanner (a ``</tool_call>`` or ``}`` inside a
string value ends nothing), reads it leniently without touching string contents, ignores
``<think>`` drafts, and never raises: anything it cannot read becomes an error message the model
can act on.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Sequence

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats import lenient
from worker.formats.base import ParsedOutput, PartialCall, ToolCallFormat, ToolDefinition
from worker.formats.common import calls_from_value, tool_name, tool_params, tools_block
from worker.grammar import GrammarBuilder, literal, rule_name

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# ---------------------------------------------------------------- system prompts (tests/unit/test_formats.py pins them)

_LONG_HEAD = (
    "Call one or more functions to assist with the user query, every time this is possible. "
    "Don't make assumptions about what values to plug into functions. Here are the available tools:\n"
)
_LONG_TAIL = (
    "\n\nTo call each function, give its name and arguments within <tool_call></tool_call> XML tags as follows:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-dict>}\n'
    "</tool_call>"
)
_H2P_HEAD = (
    "You are a function calling AI agent with self-recursion. You can call only one function at a time and "
    "analyse data you get from function response. You are provided with function signatures within "
    "<tools></tools> XML tags. The current date is: {date}. You may use agentic frameworks for reasoning and "
    "planning to help with user query. Please call a function and wait for function results to be provided to "
    "you in the next iteration. Don't make assumptions about what values to plug into function arguments. Once "
    "you have called a function, results will be fed back to you within <tool_response></tool_response> XML "
    "tags. Don't make assumptions about tool results if <tool_response> XML tags are not present since function "
    "hasn't been executed yet. Analyze the data once you get the results and call another function. At each "
    "iteration please continue adding the your analysis to previous summary. Your final response should directly "
    "answer the user query with an anlysis or summary of the results of function calls. Here are the available "
    "tools: <tools> {tools} </tools> If the provided function signatures doesn't have the function you must call, "
    "you may write executable python code in markdown syntax and call code_interpreter() function as follows: "
    '<tool_call> {{"arguments": {{"code_markdown": <python-code>, "name": "code_interpreter"}}}} </tool_call> '
    "Make sure that the json object above with code markdown block is parseable with json.loads() and the XML "
    "block with XML ElementTree. Use the following pydantic model json schema for each tool call you will make: "
    "{{'properties': {{'arguments': {{'title': 'Arguments', 'type': 'object'}}, 'name': {{'title': 'Name', "
    "'type': 'string'}}}}, 'required': ['arguments', 'name'], 'title': 'FunctionCall', 'type': 'object'}} At the "
    "very first turn you don't have <tool_results> so you shouldn't not make up the results.\n"
    "Please keep a running summary with analysis of previous function results and summaries from previous "
    "iterations.\n"
    "Do not stop calling functions until the task has been accomplished or you've reached max iteration of 10.\n"
    "Calling multiple functions at once can overload the system and increase cost so call one function at a "
    "time please.\n"
    "If you plan to continue with analysis, always call another function.\n"
    "For each function call return a valid json object (using doulbe quotes) with function name and arguments "
    "within <tool_call></tool_call> XML tags as follows:\n"
    "<tool_call>\n"
    '{{"arguments": <args-dict>, "name": <function-name>}}\n'
    "</tool_call>\n"
)

VARIANTS = ("short", "long", "hermes_2_pro")
DEFAULT_VARIANT = "long"


def hermes_prompt(tools: Sequence[ToolDefinition], variant: str | None = None, *, date: str | None = None) -> str:
    variant = variant or DEFAULT_VARIANT
    if variant == "short":
        return f"Here are the tools available:\n<tools>\n{tools_block(tools)}\n</tools>"
    if variant == "long":
        return f"{_LONG_HEAD}<tools>\n{tools_block(tools)}\n</tools>{_LONG_TAIL}"
    if variant == "hermes_2_pro":
        # The original prompt lists the tools as a Python list of compact JSON strings.
        listed = repr([json.dumps(t, separators=(",", ":"), ensure_ascii=False) for t in tools])
        return _H2P_HEAD.format(date=date or _dt.date.today().isoformat(), tools=listed)
    raise ValueError(f"unknown hermes prompt variant {variant!r}; known: {', '.join(VARIANTS)}")


# ---------------------------------------------------------------- the parser


def _lone_think_close(text: str, spans: list[tuple[int, int]]) -> int:
    """Where the thinking of a template that opened <think> in the prompt ends, else -1.

    Such output has a lone </think> with no <think> before it: everything up to it was
    thinking, calls included. Tags inside a call (in an argument string) do not count.
    """

    def outside(tag: str) -> int:
        i = text.find(tag)
        while i != -1 and any(a <= i < b for a, b in spans):
            i = text.find(tag, i + 1)
        return i

    close = outside(THINK_CLOSE)
    if close == -1:
        return -1
    opening = outside(THINK_OPEN)
    return -1 if opening != -1 and opening < close else close + len(THINK_CLOSE)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _skip_fence_open(text: str, i: int) -> int:
    """Past an opening ```json line at i (if any) and the whitespace after it."""
    if text.startswith("```", i):
        i += 3
        while i < len(text) and (text[i].isalnum() or text[i] in "_-"):
            i += 1
        i = _skip_ws(text, i)
    return i


def _skip_fence_close(text: str, i: int) -> int:
    i = _skip_ws(text, i)
    if text.startswith("```", i):
        i = _skip_ws(text, i + 3)
    return i


def _join_content(pieces: Sequence[str]) -> str:
    return "\n".join(p.strip() for p in pieces if p.strip())


def _partial_tag_at_end(text: str, tag: str) -> int:
    """Length of the longest proper prefix of tag (at least '<tool') that text ends with."""
    for k in range(len(tag) - 1, 4, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


_MENTION = -1  # one_call's answer for an opening tag with no call after it


class _Reader:
    """Walks the text once, tag by tag; collects content pieces, calls and errors."""

    def __init__(self, text: str, open_tag: str, close_tag: str, tool_names: set[str] | None = None):
        self.text = text
        self.open_tag, self.close_tag = open_tag, close_tag
        # The offered tools: only with them are the other forms of a call read (lenient.py).
        self.tool_names = tool_names or set()
        self.pieces: list[str] = []
        self.calls: list[ToolCall] = []
        self.errors: list[str] = []
        self.truncated = False
        self.spans: list[tuple[int, int]] = []  # where each call's text lies
        self.n = 0  # calls seen so far, readable or not: the number in error messages

    def add(self, results: list[ToolCall | str]) -> None:
        for r in results:
            if isinstance(r, ToolCall):
                self.calls.append(r)
            else:
                self.errors.append(r)
        self.n += len(results)

    def read_body(self, body: str) -> None:
        try:
            value = jsonish.loads(jsonish.strip_fence(body))
        except jsonish.JsonishError as e:
            self.n += 1
            self.errors.append(f"tool call {self.n} is not valid JSON: {e}")
            return
        self.add(calls_from_value(value, self.n + 1))

    def run(self) -> None:
        text = self.text
        pos = 0  # where the content not yet taken starts
        scan = 0  # where to look for the next call (past a tag that turned out to be prose)
        while True:
            k = text.find(self.open_tag, scan)
            t = text.find(THINK_OPEN, scan)
            other = self.next_lenient(scan)
            first = min((x for x in (k, t, other) if x != -1), default=-1)
            if first == -1:
                tail = text[pos:]
                cut = _partial_tag_at_end(tail, self.open_tag)
                if cut:
                    # The output stopped in the middle of writing the opening tag.
                    self.n += 1
                    self.truncated = True
                    self.errors.append(f"tool call {self.n} is incomplete: the output ended inside its opening tag")
                    tail = tail[:-cut]
                self.pieces.append(tail)
                return
            if first == t:
                # A call drafted while thinking is not a call; an unclosed <think> runs to the end.
                # Only text outside calls is searched, so "<think>" inside an argument is safe.
                self.pieces.append(text[pos:t])
                end = text.find(THINK_CLOSE, t + len(THINK_OPEN))
                if end == -1:
                    return
                pos = scan = end + len(THINK_CLOSE)
                continue
            if first == k:
                nxt = self.one_call(k + len(self.open_tag))
                if nxt == _MENTION:
                    scan = k + len(self.open_tag)  # the tag was named in prose: it stays content
                    continue
                self.pieces.append(text[pos:k])
                self.spans.append((k, len(text) if nxt is None else nxt))
                if nxt is None:
                    return
                pos = scan = nxt
                continue
            found = lenient.read_at(text, other, self.tool_names)
            if found is None:
                scan = other + 1
                continue
            self.pieces.append(text[pos:other])
            self.add(list(found[0]))
            self.spans.append((other, found[1]))
            pos = scan = found[1]

    def next_lenient(self, scan: int) -> int:
        """Where the next other form of a call may start (lenient.py), or -1."""
        if not self.tool_names:
            return -1
        m = lenient.START.search(self.text, scan)
        return -1 if m is None else m.start()

    def one_call(self, j: int) -> int | None:
        """Read the call whose body starts at j; return where to continue (None: at the end), or
        _MENTION when no call follows the tag (the tag was named in prose)."""
        text = self.text
        j = _skip_fence_open(text, _skip_ws(text, j))
        if text.startswith("<function", j) and self.tool_names:
            found = lenient.read_function(text, j, self.tool_names)
            if found is not None:
                self.add(list(found[0]))
                return self.after_call(found[1])
        if j < len(text) and text[j] in "{[":
            scan = jsonish.scan_value(text, j, stops=(self.close_tag, self.open_tag))
            if scan.end is not None:  # complete
                self.read_body(text[j : scan.end])
                return self.after_call(scan.end)
            if scan.stopped_at is not None:
                # The JSON is broken before a tag: read up to the tag for a precise error.
                self.read_body(text[j : scan.stopped_at])
                if scan.stop == self.close_tag:
                    return scan.stopped_at + len(self.close_tag)
                return scan.stopped_at
            self.truncated_call()
            return None
        # Not JSON: a (broken) call only when its own closing tag ends it, or when the output
        # ends right there; otherwise the tag was only named in prose.
        close = text.find(self.close_tag, j)
        nxt = text.find(self.open_tag, j)
        if close != -1 and (nxt == -1 or close < nxt):
            self.read_body(text[j:close])
            return close + len(self.close_tag)
        if nxt == j:  # the tag written twice: the second one opens the call
            return j
        rest = text[j:].strip()
        if not rest or rest == "`" * len(rest) or self.open_tag.startswith(rest):  # cut short
            self.truncated_call()
            return None
        return _MENTION

    def after_call(self, end: int) -> int:
        """Past a call's closing tag (and a fence), from the end of its body."""
        text = self.text
        after = _skip_fence_close(text, end)
        # Without a closing tag, whatever follows is ordinary text. Before one, stray
        # punctuation (an extra brace) is dropped, but words are kept as content.
        close = text.find(self.close_tag, after)
        nxt = text.find(self.open_tag, after)
        if close != -1 and (nxt == -1 or close < nxt):
            between = text[after:close]
            if any(ch.isalnum() for ch in between):
                self.pieces.append(between)
            return close + len(self.close_tag)
        return after

    def truncated_call(self) -> None:
        self.n += 1
        self.truncated = True
        self.errors.append(f"tool call {self.n} is incomplete: the output ended before its JSON was closed")
        return None


def parse_tagged(text: str, tool_names: set[str] | None, open_tag: str = OPEN, close_tag: str = CLOSE) -> ParsedOutput:
    """The parser for any pair of tags (Mixtral's undoes its escapes first)."""
    try:
        text = text if isinstance(text, str) else str(text)
        reader = _Reader(text, open_tag, close_tag, tool_names)
        reader.run()
        cut = _lone_think_close(text, reader.spans)
        if cut != -1:
            text = text[cut:]
            reader = _Reader(text, open_tag, close_tag, tool_names)
            reader.run()
        content = _join_content(reader.pieces)
        if not reader.calls and not reader.errors and not reader.truncated:
            # Untagged call JSON counts only on its own lines at the end of the message.
            trailing = lenient.trailing_calls(content, tool_names)
            if trailing is not None:
                return ParsedOutput(content=trailing[0].strip(), tool_calls=trailing[1])
        return ParsedOutput(
            content=content,
            tool_calls=reader.calls,
            errors=reader.errors,
            truncated_call=reader.truncated,
        )
    except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
        return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])


# ---------------------------------------------------------------- streaming

# The head of a call object as the grammar writes it (GrammarBuilder.call_object): the name, then
# the arguments key; the arguments JSON starts where this ends.
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')
# The same head while its name is being written, up to the end of the text: the name string so
# far, and its closing quote once written.
_NAME_SO_FAR = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)(")?')


def partial_tagged(text: str, open_tag: str, close_tag: str, name_of=json.loads) -> list[PartialCall]:
    """The calls of grammar-written tagged text as far as they go: each call from its opening
    tag on, its name as it is written (its beginning, ``name_done`` False, then all of it), then
    its arguments JSON as written (worker/formats/streaming.py)."""
    out: list[PartialCall] = []
    pos = 0
    while True:
        k = text.find(open_tag, pos)
        if k == -1:
            return out
        m = _CALL_HEAD.match(text, k + len(open_tag))
        if m is None:
            out.append(_head_so_far(text, k + len(open_tag), name_of))
            return out  # the arguments have not begun
        scan = jsonish.scan_value(text, m.end(), stops=(close_tag,))
        if scan.end is None:
            out.append(PartialCall(name_of(m.group(1)), text[m.end() :].rstrip(), False))
            return out
        out.append(PartialCall(name_of(m.group(1)), text[m.end() : scan.end], True))
        pos = scan.end


def _head_so_far(text: str, at: int, name_of) -> PartialCall:
    """The call whose opening tag ends at ``at`` and whose arguments have not begun: its name as
    far as it is written ("" before its string opens, or while an escape is cut in half),
    ``name_done`` once the string is closed."""
    begun = PartialCall("", "", False, name_done=False)
    m = _NAME_SO_FAR.match(text, at)
    if m is None or (m.end() < len(text) and m.group(2) is None):
        return begun
    try:
        name = name_of(f'"{m.group(1)}"')
    except ValueError:
        return begun  # an escape the next piece completes (a \u with too few digits)
    return PartialCall(name, "", False, name_done=m.group(2) is not None)


# ---------------------------------------------------------------- the format


class TaggedCallFormat(ToolCallFormat):
    """A format of JSON calls between ``open_tag`` and ``close_tag``; subclasses name it."""

    trigger = OPEN
    stop = ()
    line_openers = "{["  # a bare call object on a line of its own (lenient.trailing_calls)
    open_tag = OPEN
    close_tag = CLOSE

    def system_prompt(self, tools: Sequence[ToolDefinition], variant: str | None = None) -> str:
        return hermes_prompt(tools, variant)

    # -- grammar

    def _tag(self, tag: str) -> str:
        return literal(tag)

    def _name_literal(self, name: str) -> str:
        return literal(json.dumps(name, ensure_ascii=False))

    def _call_rules(self, b: GrammarBuilder, tools: Sequence[ToolDefinition]) -> str:
        """Add the rules for one tagged call of any of the tools; return the rule name."""
        alternatives = []
        for tool in tools:
            base = rule_name(tool_name(tool)) + "-tool-call"
            alternatives.append(b.call_object(base, self._name_literal(tool_name(tool)), tool_params(tool)))
        if not alternatives:
            raise ValueError("a tool-call grammar needs at least one tool")
        body = f"{self._tag(self.open_tag)} ws ({' | '.join(alternatives)}) ws {self._tag(self.close_tag)}"
        b.add("ws", "[ \\t\\n]? [ \\t\\n]?")  # a newline or two around the JSON, bounded
        return b.add("tool-call", body)

    def grammar(self, tools: Sequence[ToolDefinition], *, required: bool = False) -> str:
        b = GrammarBuilder()
        call = self._call_rules(b, tools)
        if required:
            b.add("root", f"{call} (ws {call})*")
        else:
            # Content may not contain "<to": the only way to write "<tool_call>" is a real call.
            b.add("content", '[^<] | "<" [^t<] | "<t" [^o<]')
            b.add("root", f"content* ({call} ws)*")
        return b.render()

    def call_grammar(self, tools: Sequence[ToolDefinition]) -> str:
        b = GrammarBuilder()
        b.add("root", self._call_rules(b, tools))
        return b.render()

    # -- parsing and rendering

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        return parse_tagged(text, tool_names, self.open_tag, self.close_tag)

    # -- streaming

    def openers(self, tool_names: set[str]) -> tuple[str, ...]:
        # the other forms (lenient.py) are read only for offered tools; a bare call object on a
        # line of its own is ``line_openers``
        lenient_forms = ("<function=", "<function ", "```", *(f"<{w}>" for w in lenient.WRAPPERS))
        return (self.open_tag, *(lenient_forms if tool_names else ()))

    def partial_calls(self, text: str) -> list[PartialCall]:
        return partial_tagged(text, self.open_tag, self.close_tag)

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(f"{OPEN}\n{jsonish.dumps({'name': c.name, 'arguments': c.arguments})}\n{CLOSE}" for c in calls)

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"
