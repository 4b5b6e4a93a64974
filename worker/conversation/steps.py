"""Carrying out a turn's steps (``triage.py``): note what waits on the caller, announce the calls,
answer those answered now, run the others concurrently, and publish each result as it is known."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from toolq.tools import ToolOutcome, effect_key
from toolq.wire.protocol import Message, PendingAction, ToolCall, Where
from worker.conversation.sink import EventSink
from worker.conversation.state import LoopState
from worker.conversation.triage import Reply, Run, Step, Wait
from worker.toolbox import ToolBox

log = structlog.get_logger("toolq.loop")


def note_waits(steps: Sequence[Step], state: LoopState) -> None:
    """The checkpoint says which calls wait on the caller, and on what; the others wait no more."""
    for s in steps:
        if isinstance(s, Wait):
            state.awaiting[s.call.id] = s.kind
        else:
            state.awaiting.pop(s.call.id, None)


def key_of(job_id: str, call: ToolCall) -> str:
    """The call's effect key: its id is in the checkpoint before it runs (``announce``), so every
    attempt derives the same key."""
    return effect_key(job_id, call.id, call.name, call.arguments)


async def announce(steps: Sequence[Step], sink: EventSink, state: LoopState, job_id: str) -> None:
    runs = any(isinstance(s, Run) for s in steps)
    for i, s in enumerate(steps):
        # The first announcement checkpoints the turn with its calls, so a job resumed while
        # they run knows they started and does not run them a second time. When calls run
        # next, it must outlive a failover first (store/durability.py: it waits for the
        # replicas asked for, or the attempt is handed back before anything runs).
        await sink.tool_call(
            s.call,
            state.iterations,
            checkpoint=state.checkpoint() if i == 0 else None,
            where=s.where,
            awaiting=state.awaiting.get(s.call.id),
            durable=i == 0 and runs,
            effect_key=key_of(job_id, s.call),
        )


async def carry_out(
    steps: Sequence[Step], box: ToolBox, sink: EventSink, state: LoopState, *, timeout_s: float, job_id: str
) -> list[PendingAction]:
    """Answer and run what can be now; return the calls that wait on the caller."""

    async def run(s: Run) -> tuple[Run, ToolOutcome]:
        structlog.contextvars.bind_contextvars(tool=s.call.name)  # this task's context only
        key = key_of(job_id, s.call)
        return s, await box.run(s.checked, call_id=s.call.id, effect_key=key, timeout_s=timeout_s)

    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(run(s)) for s in steps if isinstance(s, Run)]
    try:
        for s in steps:
            if isinstance(s, Reply):
                await _publish(s.call, s.where, s.outcome, s.executed, sink, state, job_id, unknown=s.unknown)
        for fut in asyncio.as_completed(tasks):
            done, outcome = await fut
            await _publish(done.call, done.where, outcome, True, sink, state, job_id, rerun=done.rerun)
    finally:
        for t in tasks:
            t.cancel()
        state.tools_ms += (time.perf_counter() - t0) * 1000
    return [s.pending(key_of(job_id, s.call)) for s in steps if isinstance(s, Wait)]


async def _publish(
    call: ToolCall,
    where: Where,
    outcome: ToolOutcome,
    executed: bool,
    sink: EventSink,
    state: LoopState,
    job_id: str,
    *,
    unknown: bool = False,
    rerun: bool = False,
) -> None:
    """The result joins the conversation, and is published with the checkpoint of all so far."""
    text = outcome.content if outcome.ok else (outcome.error or "the tool failed")
    state.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=text))
    log.info(
        "tool result",
        tool=call.name,
        where=where,
        ok=outcome.ok,
        executed=executed,
        duration_ms=round(outcome.duration_ms, 2),
    )
    await sink.tool_result(
        call,
        ok=outcome.ok,
        content=outcome.content,
        error=outcome.error,
        duration_ms=outcome.duration_ms,
        executed=executed,
        checkpoint=state.checkpoint(),
        where=where,
        effect_key=key_of(job_id, call),
        outcome_unknown=unknown,
        rerun=rerun,
    )
