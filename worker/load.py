"""This worker's load as dispatch.lua reads it (toolq/store/affinity.py: a preferred worker that is
full gives its jobs up at once). Written as a job starts, and again as it is about to publish its
ending: its caller's next request may arrive the moment the ending is out, and must not find this
worker still counted full."""

from __future__ import annotations

from contextlib import suppress

from redis.exceptions import RedisError

from toolq.store import affinity
from worker.state import WorkerState


async def report_load(state: WorkerState, *, finishing: int = 0) -> None:
    """Write the jobs this worker runs (less ``finishing``, jobs about to end); best effort."""
    with suppress(RedisError):
        running = max(0, state.active - finishing)
        await affinity.report_load(state.store.redis, state.model, state.worker_id, running, state.max_jobs)
