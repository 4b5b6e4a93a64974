"""The cancel watcher: stops a running job within a poll of its cancel key being set."""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisError

from toolq.store.jobstore import JobStore
from worker.endings import StopCause
from worker.state import RunningJob

CANCEL_POLL_S = 0.05


async def watch_cancel(store: JobStore, running: RunningJob) -> None:
    while not running.task.done():
        try:
            if await store.cancel_requested(running.job_id):
                running.interrupt(StopCause.cancelled)
                return
        except RedisError:
            pass  # Redis blinking: try again next tick; the job itself will report if it cannot go on
        await asyncio.sleep(CANCEL_POLL_S)
