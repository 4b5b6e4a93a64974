"""A job's timings as a waterfall, read from its events' timestamps (``ts``, Redis-side ms).

Events carry no span of their own, so each bar is the time between two events:

- **queue**: ``queued`` to the next ``started`` (again after each resume);
- **generate**: a round runs from ``started`` (or the last ``tool_result`` before it) to its first
  ``tool_call`` (or the terminal event): the model rendering, evaluating and writing the turn;
- **tool**: a ``tool_result`` that ran (``executed``) spans its ``duration_ms`` back from its ``ts``,
  with where it ran;
- **paused**: ``requires_action`` to the ``queued`` of the resume (or the end): the wait on the caller.

A pure function of the event list, so the job page and its tests read the same bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ValidationError

from toolq.wire.payloads import QueuedData, ToolCallData, ToolResultData
from toolq.wire.protocol import Event, EventType

SpanKind = Literal["queue", "generate", "tool", "paused"]


class Span(BaseModel):
    kind: SpanKind
    label: str
    start_ms: int  # from the job's first event
    end_ms: int
    where: str | None = None  # a tool's: worker, service, mcp, client
    ok: bool | None = None  # a tool's


def waterfall(events: Sequence[Event]) -> list[Span]:
    """The job's spans in the order they started."""
    if not events:
        return []
    ordered = sorted(events, key=lambda e: e.seq)
    t0 = ordered[0].ts
    spans: list[Span] = []
    queue_from: int | None = None
    gen_from: int | None = None
    paused_from: int | None = None
    rounds = 0
    queue_label = "queue"

    def add(kind: SpanKind, label: str, start: int, end: int, where: str | None = None, ok: bool | None = None) -> None:
        spans.append(Span(kind=kind, label=label, start_ms=start - t0, end_ms=max(start, end) - t0, where=where, ok=ok))

    def close_generate(at: int) -> None:
        nonlocal gen_from, rounds
        if gen_from is not None:
            rounds += 1
            add("generate", f"round {rounds}: generate", gen_from, at)
            gen_from = None

    for ev in ordered:
        try:
            if ev.type is EventType.queued:
                if paused_from is not None:
                    add("paused", "waiting on the caller", paused_from, ev.ts)
                    paused_from = None
                resumed = QueuedData.of(ev).resumed
                queue_from = ev.ts
                queue_label = "queue (resumed)" if resumed else "queue"
            elif ev.type is EventType.started:
                if queue_from is not None:
                    add("queue", queue_label, queue_from, ev.ts)
                    queue_from = None
                gen_from = ev.ts
            elif ev.type is EventType.tool_call:
                ToolCallData.of(ev)
                close_generate(ev.ts)
            elif ev.type is EventType.tool_result:
                d = ToolResultData.of(ev)
                if d.executed and d.duration_ms is not None:
                    add("tool", d.name or "tool", ev.ts - int(d.duration_ms), ev.ts, where=d.where, ok=d.ok)
                gen_from = ev.ts  # the next round starts once the results are in
            elif ev.type is EventType.requires_action:
                gen_from = None
                paused_from = ev.ts
            elif ev.terminal:
                close_generate(ev.ts)
                if paused_from is not None:
                    add("paused", "waiting on the caller", paused_from, ev.ts)
                if queue_from is not None:
                    add("queue", queue_label, queue_from, ev.ts)
        except (ValueError, ValidationError):
            continue  # an event this reader cannot make sense of draws no bar
    return sorted(spans, key=lambda s: s.start_ms)
