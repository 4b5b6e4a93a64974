"""This worker's load as dispatch.lua reads it (store/affinity.py: a preferred worker that is
full gives its jobs up at once). dispatch.lua asks only whether every slot runs a job, so the load
is written when that answer changes, not at every start and end (three writes a job, the largest
part of what affinity cost a job in bench/bench_capacity.py); the heartbeat writes it whatever,
which mends a write a Redis outage lost. A job about to publish its ending counts as ended: its
caller's next request may arrive the moment the ending is out, and must not find this worker
still counted full. So it stays free in every write until the queue has it back, the heartbeat's
too, or a beat between the two would write the worker full again just before the ending goes out."""

from __future__ import annotations

from contextlib import suppress

from store import affinity
from store.errors import RedisError
from worker.state import WorkerState


async def report_load(state: WorkerState, *, force: bool = False) -> None:
    """Write the jobs this worker runs (less those writing their ending) when whether it is full
    changed since the last write, or with ``force``; best effort."""
    running = max(0, state.active - len(state.finishing))
    full = running >= state.max_jobs
    if not force and full == state.full_reported:
        return
    with suppress(RedisError):
        await affinity.report_load(state.store.redis, state.model, state.worker_id, running, state.max_jobs)
        state.full_reported = full
