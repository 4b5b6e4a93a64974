"""What one generation's text is while the model writes it: answer text, and the calls begun.

A ``TurnReader`` is fed a generation's text piece by piece (worker/events.py feeds it the token
stream) and answers, for each piece, the answer text that may be shown now and the call deltas:
a call's index, id and name first, then pieces of its arguments JSON. The format tells it where
a call may open (``ToolCallFormat.openers``) and which calls the text so far holds
(``ToolCallFormat.partial_calls``): as in vLLM's tool parsers, one object per format owns both
whole-output and streaming extraction.

Calls stream only where a grammar guarantees that they parse (``Guarantee``): the whole output
under a required grammar (``all``), or the text from a lazy grammar's trigger on (``trigger``).
A call is announced as soon as its name is certain: once written, or, for a format that reports
a call from its opening and its name as it is being written (``PartialCall.name_done``), once
only one offered name begins with what is written of it, since the grammar writes only offered
names. With one tool offered (a named tool_choice, say) that is as soon as the call's opening
is written, several decode steps before its name is.
Where a call may open outside a grammar (a lenient form, a format with no trigger, no grammar),
nothing more of the turn is shown: the final event says what was content and what was calls,
after the worker checked them. Answer text before a possible opening streams at once, ``<``,
``[`` and ``{`` included, unless it could begin one of the format's own opening marks.

A call whose name repeats an earlier call of the turn is held until it is complete: the loop
drops a verbatim repeat (worker/loop.py ``_without_repeats``), and a stream cannot take back a
call it has announced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import structlog

from toolq.wire.protocol import new_call_id
from worker import jsonish

if TYPE_CHECKING:
    from worker.formats.base import ParsedOutput, PartialCall, ToolCallFormat, ToolDefinition
    from worker.generation import GenerationResult

# none: no call is generated under a grammar; trigger: calls from the lazy grammar's trigger on
# are; all: the whole output is (tool_choice required or a named tool)
Guarantee = Literal["none", "trigger", "all"]

THINK_MARKS = ("<think>", "</think>")  # drafts the parsers drop from content
log = structlog.get_logger("toolq.streaming")


@dataclass
class CallDelta:
    """One piece of a streamed call, as the token event carries it: the first piece of a call has
    its ``id`` and ``name``, the later ones a piece of the arguments JSON."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class TurnDelta:
    """What one piece of text adds: answer text to show, and call deltas."""

    content: str = ""
    calls: list[CallDelta] = field(default_factory=list)

    def add(self, other: TurnDelta) -> None:
        """Coalesce: a later delta's argument pieces join the earlier ones of the same call."""
        self.content += other.content
        for d in other.calls:
            last = self.calls[-1] if self.calls else None
            if last is not None and last.index == d.index and d.id is None:
                last.arguments += d.arguments
            else:
                self.calls.append(CallDelta(d.index, d.id, d.name, d.arguments))


def first_opening(text: str, openers: Sequence[str], line_openers: str) -> tuple[int, bool] | None:
    """Where a call may open in ``text``: (index, certain). Certain: one of ``openers`` is written
    there, or a character of ``line_openers`` starts a line. Not certain: the text ends with the
    beginning of an opener, which the next piece may complete or rule out."""
    hits = [i for i in (text.find(o) for o in openers if o) if i >= 0]
    if line_openers:
        m = re.search(r"(?m)^[ \t]*([" + re.escape(line_openers) + "])", text)
        if m is not None:
            hits.append(m.start(1))
    if hits:
        return min(hits), True
    for k in range(max((len(o) for o in openers), default=1) - 1, 0, -1):
        tail = text[-k:]
        if len(tail) == k and any(o.startswith(tail) and len(o) > k for o in openers):
            return len(text) - k, False
    return None


def call_signature(name: str, arguments: str) -> str | None:
    """The same signature worker/loop.py's ``call_signature`` gives a parsed call."""
    try:
        value = jsonish.loads(arguments) if arguments.strip() else {}
    except jsonish.JsonishError:
        return None
    return name + json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class _Announced:
    index: int | None = None  # the stream's index; None until announced
    sent: int = 0  # characters of the arguments sent
    dropped: bool = False  # a verbatim repeat: never streamed


class TurnReader:
    """Reads one generation of one format as it is written; see the module docstring."""

    def __init__(
        self,
        fmt: ToolCallFormat,
        *,
        tool_names: set[str],
        guarantee: Guarantee,
        trigger: str | None = None,
    ):
        self.fmt = fmt
        self.tool_names = tool_names
        self.guarantee: Guarantee = guarantee if tool_names else "none"
        self.trigger = trigger
        self.text = ""
        self.shown = 0  # characters of answer text shown
        self.region: int | None = 0 if self.guarantee == "all" else None  # where guaranteed calls begin
        self.held = self.guarantee != "all" and bool(tool_names) and fmt.opens_at_start
        # the parsers read calls (and drop drafts) whether or not tools were offered
        self._openers = (*fmt.openers(tool_names), *THINK_MARKS)
        self._line_openers = fmt.line_openers if tool_names else ""
        self._ids: list[str] = []
        self._calls: list[_Announced] = []
        self._next_index = 0
        self._signatures: list[str | None] = []

    @classmethod
    def for_generation(
        cls, fmt: ToolCallFormat, tools: Sequence[ToolDefinition], grammar: str | None, trigger: str | None
    ) -> TurnReader:
        """The reader of one generation of the loop: the tools offered, and whether a grammar
        covers the whole output (a grammar with no trigger, while tools are offered), the text
        from its trigger on, or nothing."""
        names = {(t.get("function") or t).get("name", "") for t in tools}
        guarantee: Guarantee = "none"
        if names and grammar is not None:
            guarantee = "trigger" if trigger else "all"
        return cls(fmt, tool_names=names, guarantee=guarantee, trigger=trigger)

    def call_id(self, i: int) -> str:
        """The id of the i-th call of the text, the same in the stream and in the parsed calls."""
        while len(self._ids) <= i:
            self._ids.append(new_call_id())
        return self._ids[i]

    def feed(self, piece: str) -> TurnDelta:
        self.text += piece
        try:
            return self._read()
        except Exception:  # a reader's bug must not cost the job: the final event says it all
            log.exception("streaming extraction failed; the rest of the turn waits for the final event")
            self.region, self.held = None, True
            return TurnDelta()

    def _read(self) -> TurnDelta:
        out = TurnDelta()
        if self.region is None and not self.held:
            end = len(self.text)
            found = first_opening(self.text, self._openers, self._line_openers)
            if found is not None:
                end, certain = found
                if certain:
                    if self.guarantee == "trigger" and self.trigger and self.text.startswith(self.trigger, end):
                        self.region = end
                    else:
                        self.held = True
            if end > self.shown:
                out.content, self.shown = self.text[self.shown : end], end
        if self.region is not None:
            out.calls = self._call_deltas(self.fmt.partial_calls(self.text[self.region :]))
        return out

    def _only_name(self, beginning: str) -> str | None:
        """The offered name that a name beginning so says, when no other offered name begins so.
        Calls are read only where a grammar writes them, and a grammar writes only offered names:
        that one is the name the model is writing."""
        names = [n for n in self.tool_names if n.startswith(beginning)]
        return names[0] if len(names) == 1 else None

    def _call_deltas(self, calls: Sequence[PartialCall]) -> list[CallDelta]:
        out: list[CallDelta] = []
        for i, pc in enumerate(calls):
            if i == len(self._calls):
                self._calls.append(_Announced())
                self._signatures.append(None)
            state = self._calls[i]
            if state.dropped:
                continue
            if pc.done and self._signatures[i] is None:
                self._signatures[i] = call_signature(pc.name, pc.arguments)
            if state.index is None:
                name = pc.name if pc.name_done else self._only_name(pc.name)
                if not name:
                    break
                earlier = [c.name for c in calls[:i]]
                if name in earlier and not pc.done:
                    break  # it may repeat an earlier call: wait for all of it
                if pc.done and self._signatures[i] is not None and self._signatures[i] in self._signatures[:i]:
                    state.dropped = True
                    continue
                state.index, self._next_index = self._next_index, self._next_index + 1
                out.append(CallDelta(state.index, self.call_id(i), name, ""))
            piece = pc.arguments[state.sent :]
            if piece:
                out.append(CallDelta(state.index, arguments=piece))
                state.sent = len(pc.arguments)
            if not pc.done:
                break  # calls are written one after the other
        return out


def with_streamed_ids(parsed: ParsedOutput, gen: GenerationResult) -> ParsedOutput:
    """The parsed calls under the ids their deltas were streamed with, so that a caller who
    read a call from the stream finds it under the same id in the events and the answer. The
    reader and the parser number the calls of one text in the same order."""
    if gen.call_id is not None:
        for i, call in enumerate(parsed.tool_calls):
            call.id = gen.call_id(i)
    return parsed
