"""EventLog: the events of one attempt of one job, written through JobStore's single script
(seq, stream, both channels and the record in one step), fenced by the attempt number."""

from __future__ import annotations

import asyncio
from typing import Any

from store.jobstore import JobStore
from store.records import JobRecord
from toolq.wire.payloads import (
    CallDeltaData,
    CancelledData,
    ErrorData,
    EventData,
    FinalData,
    StartedData,
    TokenData,
    ToolCallData,
    ToolResultData,
)
from toolq.wire.protocol import JobResult, ToolCall, Where
from worker import metrics
from worker.conversation.state import checkpoint_usage
from worker.formats.streaming import TurnDelta, TurnReader


class EventLog:
    """A checkpoint carries the job's token figures so far, and goes out with them: the store
    counts a round's tokens against its tenant's minute and day budgets with the checkpoint that
    holds them (store/lua/emit.lua), not only when the job ends."""

    def __init__(self, store: JobStore, job_id: str, attempt: int, *, lease_ms: int):
        self.store = store
        self.job_id = job_id
        self.attempt = attempt
        self.lease_ms = lease_ms
        # Token text is coalesced: the generation thread appends, one task flushes whatever has
        # gathered, so a fast model costs one Redis round trip per flush, not per token. Each
        # piece comes with its generation's TurnReader, which the flush feeds (off the decode
        # thread) to say what is answer text and which calls have begun.
        self._pending: list[tuple[str, TurnReader | None]] = []
        self._flushing: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _emit(self, data: EventData, **kw: Any) -> int:
        return await self.store.emit(self.job_id, data.type, data.to_wire(), attempt=self.attempt, **kw)

    async def started(self, *, worker_id: str, model: str) -> JobRecord:
        """Start the attempt and return the job's record as it stands after the start. Durable
        (store/durability.py): once the replicas hold the lease this writes, any later write a
        failover loses is recovered by a takeover when the lease runs out; without it, a job
        whose arq pick survived but whose start did not would wait queued for ever."""
        fresh = StartedData(attempt=self.attempt, worker=worker_id, model=model, resumed=False)
        return await self.store.start(
            self.job_id,
            attempt=self.attempt,
            fresh=fresh.to_wire(),
            resumed=fresh.model_copy(update={"resumed": True}).to_wire(),
            lease_ms=self.lease_ms,
            worker=worker_id,
        )

    async def tool_call(
        self,
        call: ToolCall,
        iteration: int,
        *,
        checkpoint: dict[str, Any] | None = None,
        where: Where = "worker",
        awaiting: str | None = None,
        durable: bool = False,
        effect_key: str | None = None,
    ) -> int:
        data = ToolCallData(id=call.id, name=call.name, arguments=call.arguments, iteration=iteration, where=where)
        if effect_key:
            data.effect_key = effect_key
        if awaiting:
            data.awaiting = awaiting  # "client" or "approval": the job pauses for its caller
        return await self._emit(data, checkpoint=checkpoint, usage=checkpoint_usage(checkpoint), durable=durable)

    async def tool_result(
        self,
        call: ToolCall,
        *,
        ok: bool,
        content: str,
        error: str | None,
        duration_ms: float,
        executed: bool,
        checkpoint: dict[str, Any],
        where: Where = "worker",
        effect_key: str | None = None,
        outcome_unknown: bool = False,
        rerun: bool = False,
    ) -> int:
        # The checkpoint goes in the same script call as the event: a subscriber never sees a
        # result that a resumed attempt would produce again.
        await self.flush_tokens()
        metrics.observe_tool(call.name, ok, duration_ms)
        data = ToolResultData(
            id=call.id,
            name=call.name,
            ok=ok,
            content=content,
            error=error,
            duration_ms=round(duration_ms, 3),
            executed=executed,
            where=where,
        )
        if effect_key:
            data.effect_key = effect_key
        if outcome_unknown:
            data.outcome_unknown = True
        if rerun:
            data.rerun = True
        return await self._emit(data, checkpoint=checkpoint, usage=checkpoint_usage(checkpoint))

    async def end(self, data: FinalData | ErrorData | CancelledData, result: JobResult) -> int:
        """The terminal event with the job's result."""
        await self.flush_tokens()
        seq = await self._emit(data, result=result, usage=result.usage)
        metrics.observe_result(data.type.value, result)
        return seq

    # ------------------------------------------------------------------ tokens

    def start_token_stream(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._flushing = asyncio.create_task(self._flush_forever())

    def push_text(self, text: str, reader: TurnReader | None = None) -> None:
        """Called from the generation thread."""
        self._pending.append((text, reader))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush_tokens()

    async def flush_tokens(self) -> None:
        # One flush at a time: a tool_result or terminal event must wait for a token write in
        # flight, or that write would land after the terminal event and be refused (text lost).
        async with self._flush_lock:
            if self._pending:
                pending, self._pending = self._pending, []
                await self._emit(token_data(pending))

    async def close(self) -> None:
        if self._flushing is not None:
            self._flushing.cancel()
            await asyncio.gather(self._flushing, return_exceptions=True)
            self._flushing = None


def token_data(pieces: list[tuple[str, TurnReader | None]]) -> TokenData:
    """A token event's data: ``text``, the model's raw output; with a reader, also ``content``
    (the answer text that may be shown) and ``calls`` (call deltas). Optional fields with defaults:
    a reader of the protocol that knows only ``text`` reads these events as before."""
    data = TokenData(text="".join(text for text, _ in pieces))
    read: TurnDelta | None = None
    for text, reader in pieces:
        if reader is not None:
            read = read or TurnDelta()
            read.add(reader.feed(text))
    if read is not None:
        data.content = read.content
        if read.calls:
            data.calls = [CallDeltaData(index=d.index, id=d.id, name=d.name, arguments=d.arguments) for d in read.calls]
    return data
