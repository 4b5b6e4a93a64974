"""What becomes of each call of a turn: run it now, answer it without running it, or wait on the
caller. One decision per call, made in one place, whether the turn is new or was left by an
earlier attempt; the loop only carries the steps out.

Where a call runs decides the last part (``_by_where``): a call that needs approval waits for it,
a client tool's call waits for the caller's result, anything else runs in the worker's reach.

A call an earlier attempt started and never answered has an unknown outcome: it may have acted.
It runs again, under the same effect key, when its tool is declared idempotent (a second run under
the key has no second effect); otherwise the model is told it was interrupted, and the event says
the outcome is unknown (the call's states: ARCHITECTURE.md, "A call's effects").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from toolq.tools import CheckedCall, ToolOutcome
from toolq.wire.protocol import ActionKind, PendingAction, ToolCall, Where
from worker.conversation import texts
from worker.conversation.transcript import call_signature
from worker.toolbox import BoxTool, ToolBox

log = structlog.get_logger("toolq.loop")


@dataclass(frozen=True)
class Run:
    """Run the call: its arguments were checked once, and the run takes the checked values."""

    call: ToolCall
    where: Where
    checked: CheckedCall
    rerun: bool = False  # a lost attempt started it; it runs again under the same effect key


@dataclass(frozen=True)
class Reply:
    """Answer the call without running it now (a problem, a repeat, the caller's own answer)."""

    call: ToolCall
    where: Where
    outcome: ToolOutcome
    executed: bool = False  # the call did run, elsewhere (the caller's result of a client tool)
    unknown: bool = False  # a lost attempt started it and it is not run again: it may have acted


@dataclass(frozen=True)
class Wait:
    """The call waits on the caller: its result (a client tool) or an approval."""

    call: ToolCall
    where: Where
    kind: ActionKind

    def pending(self, effect_key: str | None = None) -> PendingAction:
        c = self.call
        return PendingAction(
            id=c.id, name=c.name, arguments=c.arguments, kind=self.kind, where=self.where, effect_key=effect_key
        )


Step = Run | Reply | Wait


def _failed(call: ToolCall, where: Where, text: str, *, executed: bool = False) -> Reply:
    return Reply(call, where, ToolOutcome(False, "", text, 0.0), executed)


def _where(tool: BoxTool | None) -> Where:
    return tool.where if tool else "worker"


def _by_where(call: ToolCall, tool: BoxTool, *, approved: bool) -> Wait | None:
    """The wait of a valid call, or None when it runs now."""
    if tool.requires_approval and not approved:
        return Wait(call, tool.where, "approval")
    if tool.where == "client":
        return Wait(call, tool.where, "client")
    return None


def new_call(call: ToolCall, box: ToolBox, earlier: Mapping[str, str]) -> Step:
    """A call the model just wrote. ``earlier``: the results of calls already answered, by
    signature (``transcript.earlier_results``)."""
    tool = box.get(call.name)
    if tool is None:
        return _failed(call, "worker", texts.unknown_tool(call.name, box.names()))
    checked = box.check(call.name, call.arguments)  # once: a run takes the checked values
    if checked.errors:
        return _failed(call, tool.where, texts.invalid_arguments(call.name, checked.errors))
    result = earlier.get(call_signature(call.name, call.arguments))
    if result is not None:
        return Reply(call, tool.where, ToolOutcome(True, texts.already_called(call.name, result), None, 0.0))
    return _by_where(call, tool, approved=False) or Run(call, tool.where, checked)


def left_call(call: ToolCall, box: ToolBox, kind: ActionKind | None, answer: dict[str, Any] | None) -> Step:
    """A call of a turn an earlier attempt left unanswered. ``kind``: what it waited on (None: it
    was running when that attempt stopped); ``answer``: the caller's, if given."""
    tool = box.get(call.name)
    where = _where(tool)
    if kind is None:
        # its outcome is unknown: run it again only where that cannot act twice
        if tool is not None and tool.source is not None and tool.idempotent:
            log.warning("tool call interrupted by a lost attempt; run again under its effect key", tool=call.name)
            return Run(call, where, box.check(call.name, call.arguments), rerun=True)
        log.warning("tool call interrupted by a lost attempt; not run again", tool=call.name)
        return Reply(call, where, ToolOutcome(False, "", texts.interrupted(call.name), 0.0), unknown=True)
    if answer is None:
        return Wait(call, where if tool else "client", kind)
    if kind == "client":
        ok = not answer.get("is_error", False)
        text = str(answer.get("content", ""))
        outcome = ToolOutcome(ok, text if ok else "", None if ok else text, 0.0)
        return Reply(call, "client", outcome, executed=True)
    if not answer.get("approved"):
        return _failed(call, where, texts.refused(call.name, answer.get("reason")))
    wait = _by_where(call, tool, approved=True) if tool else None
    # approved: it runs now, unless the caller runs it (a tool gone from this worker fails its check)
    return wait or Run(call, where, box.check(call.name, call.arguments))
