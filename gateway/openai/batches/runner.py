"""Runs the fleet's batches in its spare capacity: every gateway runs one ``BatchRunner``, and a
batch is run by whichever gateway holds its lease (store/batches.py), so a gateway that dies
mid-batch hands it to another within a lease.

Each tick, for each batch it holds:
1. **Collect**: a line whose job ended gets its answer, written once (gateway/openai/batches/answers.py).
2. **End**: past its window, a batch cancels its lines in flight, and each line not answered is
   ``batch_expired``; a batch being cancelled does the same with ``batch_cancelled``, keeping what
   was answered before. Once nothing is in flight, it is finalized: the output and error files are
   written (each line once, in either), and the batch ends ``completed``, ``expired`` or ``cancelled``.
3. **Feed**: lines join the queue only into room the interactive tenants leave: while no other
   tenant's job of the model waits in the queue, up to its workers' engine slots (less one per
   worker while interactive work was seen lately, unless the worker takes an interactive reserve
   of jobs beyond its slots, which lines never fill), with one more line per such worker waiting
   for its next free slot, refilled as each line's job ends, and never more than
   ``max_in_flight`` of one batch. So a
   50,000-line file is never 50,000 queued jobs, and an interactive job never waits behind a
   batch's backlog. A line's job is its tenant's, charged to its budgets and counted in its fair
   share like any other; a full queue or a spent budget makes the line wait, not fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass

import structlog

from gateway.openai.batches.answers import answer_of, refused, unanswered
from gateway.openai.batches.lines import Line, line_job
from gateway.state import GatewayState
from gateway.submission import enqueue
from store.batches import BatchStore
from store.fair import FairQueue
from store.files import FileStore
from store.fleet import queue_depths
from store.jobstore import JobNotFound
from toolq.errors import BudgetExhausted, QueueFull, StoreQuotaExceeded, ToolqError

log = structlog.get_logger("toolq.gateway.batches")

__all__ = ["BatchRunner", "RunnerSettings"]


@dataclass(frozen=True)
class RunnerSettings:
    tick_s: float = 0.25
    lease_ms: int = 10_000
    max_in_flight: int = 64  # lines of one batch in the queue or running at once
    headroom_slots: int = 1  # slots per worker without a reserve the batches leave free...
    headroom_hold_s: float = 30.0  # ...while interactive work was seen this recently; alone, all of them


class BatchRunner:
    def __init__(self, state: GatewayState, batches: BatchStore, files: FileStore, settings: RunnerSettings):
        self.state = state
        self.batches = batches
        self.files = files
        self.settings = settings
        self.holder = "gw-" + secrets.token_hex(6)
        self._interactive_at: dict[str, float] = {}  # model -> when work not of this batch was last seen
        self._leased: dict[str, float] = {}  # batch id -> when this runner last took or renewed its lease
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="toolq-batch-runner")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        wake = self.state.observer.batch_wake
        while True:
            moved = False
            wake.clear()  # a job that ends (or a batch created here) from now on wakes the next tick
            try:
                for batch_id in await self.batches.active():
                    if await self._lease(batch_id):
                        moved = await self.step(batch_id) or moved
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis away, say: the batch's state is in Redis; try again next tick
                log.exception("batch runner tick failed")
            # a tick that answered or fed lines goes again at once (room may have freed meanwhile);
            # else the next tick comes when a job ends (a line's slot is free), a batch is created
            # here, or after tick_s
            if moved:
                await asyncio.sleep(0.01)
            else:
                # asyncio.wait, not wait_for: 3.11's wait_for can swallow a cancel that comes as
                # the event is set, and stop() then waits for ever
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait({woken}, timeout=self.settings.tick_s)
                finally:
                    woken.cancel()

    async def _lease(self, batch_id: str) -> bool:
        """Whether this runner holds the batch: a lease taken or renewed within the last third of
        its time is held still (no other runner can take it before it runs out), so a busy tick
        costs no lease round trips; older, it is taken or renewed in Redis."""
        now = time.monotonic()
        if now - self._leased.get(batch_id, float("-inf")) < self.settings.lease_ms / 3000:
            return True
        if await self.batches.take_lease(batch_id, self.holder, self.settings.lease_ms):
            self._leased[batch_id] = now
            return True
        self._leased.pop(batch_id, None)
        return False

    async def step(self, batch_id: str) -> bool:
        """One tick of one batch; whether any of its lines was answered or fed."""
        rec = await self.batches.record(batch_id)
        if rec is None or rec["status"] not in ("in_progress", "cancelling", "finalizing"):
            return False
        endpoint = rec["endpoint"]
        moved, in_flight = await self._collect(batch_id, endpoint)
        status = rec["status"]
        if status == "in_progress" and time.time() >= int(rec["expires_at"]):
            status = "expiring"
        if status in ("cancelling", "expiring"):
            await self._end(batch_id, endpoint, "cancelled" if status == "cancelling" else "expired")
            return moved
        cursor = int(rec["cursor"])
        if status == "in_progress" and cursor < int(rec["total"]):
            return await self._feed(batch_id, endpoint, rec["tenant"], cursor, in_flight) or moved
        if not in_flight:
            await self._finalize(batch_id, rec["tenant"], "completed")
        return moved

    async def _collect(self, batch_id: str, endpoint: str) -> tuple[bool, int]:
        """Answer the lines whose jobs ended; whether there were any, and how many lines are
        still in flight."""
        moved, left = False, 0
        in_flight = await self.batches.in_flight(batch_id)
        # one field of each first (one round trip), the whole record only of a job that ended
        ended = await self.state.store.ended(list(in_flight.values()))
        for index, job_id in in_flight.items():
            if ended.get(job_id) is False:
                left += 1
                continue  # still running
            line = await self._line(batch_id, index)
            try:
                job = await self.state.store.record(job_id)
            except JobNotFound:
                gone = unanswered(line.custom_id, "job_expired", f"the line's job {job_id} expired before it was read")
                await self.batches.answer(batch_id, index, line.custom_id, gone, ok=False)
                moved = True
                continue
            if job.terminal:
                answer, ok = answer_of(endpoint, line.custom_id, line.body, job)
                await self.batches.answer(batch_id, index, line.custom_id, answer, ok=ok)
                moved = True
            else:
                left += 1
        return moved, left

    async def _line(self, batch_id: str, index: int) -> Line:
        stored = await self.batches.next_lines(batch_id, index, 1)
        return Line.of(index, stored[0])

    async def _room(self, model: str, tenant: str, in_flight: int) -> int:
        """How many more lines may join the queue of ``model`` now: none while a job of another
        tenant waits in the queue, else up to its workers' engine slots, less the lines in flight.
        A worker may take ``TOOLQ_INTERACTIVE_RESERVE`` jobs beyond its slots (its ``max_jobs``),
        which lines never fill (a line is a ``spare`` job: store/lua/dispatch.lua gives it only a
        free engine slot), so an interactive job is picked at once; a worker without one keeps
        ``headroom_slots`` free while other work was seen lately. With fair share, one line more
        per worker with a reserve waits for a fair turn, so a slot a line frees is filled by the
        worker itself the moment the line ends (worker/load.py ``slot_freed``), not after the end
        event's trip through this runner and back; without a reserve such a line would fill the
        headroom, so none waits. The slots are refilled on the job's end event
        (``EventObserver.batch_wake``), not a tick later. Only live figures count here (the queue,
        this batch's lines); a worker's busy count is as old as its last heartbeat."""
        workers = (await self.state.fleet.get()).workers_of(model)
        busy = sum(w.busy for w in workers)
        waiting = await self._waiting(model, busy) if workers else {}
        others = sum(n for t, n in waiting.items() if t != tenant)
        now = time.monotonic()
        if others > 0 or busy > in_flight:
            self._interactive_at[model] = now
        if not workers or others > 0:
            return 0  # another tenant's jobs wait: leave the room to them
        recent = now - self._interactive_at.get(model, float("-inf")) < self.settings.headroom_hold_s
        keep = self.settings.headroom_slots if recent else 0
        # a worker with a reserve (max_jobs beyond its slots) needs no slot held back
        lanes = sum(max(0, min(w.slots, w.max_jobs) - (keep if w.max_jobs <= w.slots else 0)) for w in workers)
        if self.state.store.fair:
            lanes += sum(1 for w in workers if w.max_jobs > w.slots)  # the line waiting for each one's next slot
        return max(0, min(lanes - in_flight, self.settings.max_in_flight - in_flight))

    async def _waiting(self, model: str, busy: int) -> dict[str, int]:
        """Jobs of ``model`` waiting for a slot, per tenant under fair share; else arq's queue
        less the jobs running (arq keeps a job in its queue until it ends), under no tenant."""
        if self.state.store.fair:
            return await FairQueue(self.state.store.redis).waiting(model)
        queued = max(0, (await queue_depths(self.state.store.redis, [model]))[0] - busy)
        return {"": queued} if queued else {}

    async def _feed(self, batch_id: str, endpoint: str, tenant: str, cursor: int, in_flight: int) -> bool:
        """Feed lines into the room there is; whether any was fed (or answered at once)."""
        first = await self.batches.next_lines(batch_id, cursor, 1)
        if not first:
            return False
        head = line_job(endpoint, Line.of(cursor, first[0]).body)
        room = await self._room(head.model or "", tenant, in_flight)
        moved = False
        for offset, stored in enumerate(await self.batches.next_lines(batch_id, cursor, room)):
            index = cursor + offset
            line = Line.of(index, stored)
            try:
                job = head if offset == 0 else line_job(endpoint, line.body)
                job = job.model_copy(update={"metadata": {**job.metadata, "toolq_batch": batch_id}, "priority": 0})
                key = f"batch:{batch_id}:{index}"
                submitted = await enqueue(
                    self.state, job, tenant, idempotency_key=key, default_webhook=False, spare=True
                )
            except (QueueFull, BudgetExhausted, StoreQuotaExceeded):
                # the line waits for room, its tenant's next window, or its finished jobs' records
                # to expire (store/byte_quota.py); past the batch's window it expires
                return moved
            except ToolqError as e:  # its model or tools are no longer served
                answer = refused(line.custom_id, e.status, e.message, e.code)
                await self.batches.answer(batch_id, None, line.custom_id, answer, ok=False)
                await self.batches.skipped(batch_id, index)
                moved = True
                continue
            await self.batches.fed(batch_id, index, submitted.job_id)
            self.state.metrics.batch_lines_fed.inc()
            moved = True
        return moved

    async def _end(self, batch_id: str, endpoint: str, status: str) -> None:
        """Cancel what is in flight; once it has ended, answer every line left and finalize."""
        in_flight = await self.batches.in_flight(batch_id)
        for job_id in in_flight.values():
            with contextlib.suppress(JobNotFound):
                await self.state.store.cancel(job_id)
        if (await self._collect(batch_id, endpoint))[1]:
            return  # running jobs stop at their next token; the next tick collects them
        rec = await self.batches.record(batch_id)
        assert rec is not None
        code = "batch_cancelled" if status == "cancelled" else "batch_expired"
        why = (
            "the batch was cancelled before this line ran"
            if status == "cancelled"
            else ("the batch's completion window ended before this line ran")
        )
        answered = await self.batches.answered(batch_id)
        for index, stored in await self.batches.lines(batch_id):
            line = Line.of(index, stored)
            if line.custom_id not in answered:
                await self.batches.answer(
                    batch_id, None, line.custom_id, unanswered(line.custom_id, code, why), ok=False
                )
        await self._finalize(batch_id, rec["tenant"], status)

    async def _finalize(self, batch_id: str, tenant: str, status: str) -> None:
        self._leased.pop(batch_id, None)
        await self.batches.set_status(batch_id, "finalizing")
        out, err = await self.batches.outputs(batch_id)
        out_id = err_id = None
        if out:
            out_id = (
                await self.files.put(tenant, f"{batch_id}_output.jsonl", "batch_output", _jsonl(out), quota=False)
            ).id
        if err:
            err_id = (
                await self.files.put(tenant, f"{batch_id}_error.jsonl", "batch_output", _jsonl(err), quota=False)
            ).id
        await self.batches.finish(batch_id, status, output_file_id=out_id, error_file_id=err_id)  # and announces it
        self.state.metrics.batches_ended.labels(status).inc()
        log.info("batch ended", batch_id=batch_id, status=status, output=len(out), errors=len(err))


def _jsonl(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()
