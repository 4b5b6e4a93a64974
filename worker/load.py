"""This worker's load as dispatch.lua reads it (store/affinity.py: a preferred worker that is
full gives its jobs up at once). dispatch.lua asks only whether every slot runs a job, so the load
is written when that answer changes, not at every start and end (three writes a job, the largest
part of what affinity cost a job in bench/bench_capacity.py); the heartbeat writes it whatever,
which mends a write a Redis outage lost. A job about to publish its ending counts as ended: its
caller's next request may arrive the moment the ending is out, and must not find this worker
still counted full. So it stays free in every write until the queue has it back, the heartbeat's
too, or a beat between the two would write the worker full again just before the ending goes out.

The same moment frees an engine slot, which a batch line may be waiting for (store/lua/dispatch.lua
gives lines only free slots, never the interactive reserve). A worker whose reserve is free waits
for a wake, not for its own jobs to end, and while every slot runs it does not read the lines'
wake list (worker/pickup.py), so ``slot_freed`` wakes it while its looks saw lines lately: a line
waiting then is taken the moment the slot frees. Lines feed in after each end, so "lately" is a
while, not the last look, which may have taken the last line before the next one came."""

from __future__ import annotations

import time
from contextlib import suppress

from store import affinity
from store.errors import RedisError
from worker.state import WorkerState

LINES_HOLD_S = 1.0  # a worker whose looks saw a batch line this recently wakes itself as a slot frees


async def report_load(state: WorkerState, *, force: bool = False) -> None:
    """Write the jobs this worker runs (less those writing their ending) when whether it is full
    changed since the last write, or with ``force``; best effort. One write at a time, each of
    the counts as they are when it goes, so writes from jobs starting and ending at once land in
    order and the last says what is true now."""
    async with state.load_lock:
        running = max(0, state.active - len(state.finishing))
        full = running >= state.max_jobs
        if not force and full == state.full_reported:
            return
        with suppress(RedisError):
            await affinity.report_load(state.store.redis, state.model, state.worker_id, running, state.max_jobs)
            state.full_reported = full


async def slot_freed(state: WorkerState, job_id: str) -> None:
    """A job of this worker is writing its ending: its slot counts free from now on, in its load
    and in the pickup's count of the jobs it holds."""
    if state.free_early is not None:
        state.free_early(job_id)
    await report_load(state)
    if state.fair is not None and time.monotonic() - state.lines_seen_s < LINES_HOLD_S:
        with suppress(RedisError):
            await state.fair.nudge(state.model, state.worker_id)
