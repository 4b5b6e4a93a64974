"""The cancel watcher: stops a running job within a poll of its cancel key being set.

One watcher per worker looks at the cancel keys of all its running jobs in one round trip a
poll, where a watcher per job cost a round trip per job a poll: 20 a second for every running
job, for a job that runs for seconds more Redis work than all the rest of it (docs/architecture/redis.md,
"What a job costs Redis"). worker/app.py starts it with the worker."""

from __future__ import annotations

import asyncio
import time

import structlog

from store.errors import RedisError
from worker.endings import StopCause
from worker.state import WorkerState

CANCEL_POLL_S = 0.05

log = structlog.get_logger()


async def watch_cancels(state: WorkerState) -> None:
    """Until the worker stops: every poll, interrupt each running job whose cancel key is set."""
    while True:
        await asyncio.sleep(CANCEL_POLL_S)
        try:
            await look(state)
        except RedisError:
            pass  # Redis blinking: look again next poll; the jobs themselves report if they cannot go on
        except Exception as e:  # never let the watcher die quietly: cancels would stop working
            log.error("cancel watch error", error=repr(e))


async def look(state: WorkerState) -> None:
    # A job's first look is a poll after its start: a job cancelled before it started ends
    # without running (JobStore.cancel ends a queued job itself, and `started` is refused after
    # that), so a look at once would only cost a look for every job that ends within a poll.
    now = time.monotonic()
    due = [r for r in list(state.running.values()) if not r.task.done() and now - r.since >= CANCEL_POLL_S]
    if not due:
        return
    cancelled = await state.store.cancels_requested([r.job_id for r in due])
    for r in due:
        if r.job_id in cancelled and not r.task.done():
            r.interrupt(StopCause.cancelled)
