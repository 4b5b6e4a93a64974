"""The cancel watcher: stops a running job within a poll of its cancel key being set."""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisError

from toolq.store.jobstore import JobStore
from worker.endings import StopCause
from worker.state import RunningJob

CANCEL_POLL_S = 0.05


async def watch_cancel(store: JobStore, running: RunningJob) -> None:
    # The first look is a poll after the start: a job cancelled before it started ends without
    # running (JobStore.cancel ends a queued job itself, and `started` is refused after that), so
    # a look at once would only cost a Redis call for every job that ends within a poll.
    while True:
        await asyncio.sleep(CANCEL_POLL_S)
        if running.task.done():
            return
        try:
            if await store.cancel_requested(running.job_id):
                running.interrupt(StopCause.cancelled)
                return
        except RedisError:
            pass  # Redis blinking: try again next tick; the job itself will report if it cannot go on
