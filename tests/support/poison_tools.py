"""Poison tools for the quarantine tests (tests/integration/test_quarantine.py): a job that calls
one takes down, or stalls, every worker that runs it, as the runaway grammar build of issue 34 did.
A worker serves them only when a test names this module (``--tools tests.support.poison_tools``)."""

from __future__ import annotations

import os
import signal
import time

import redis

from toolq.tools import tool


@tool
def crash_worker(tag: str) -> str:
    """Notes the worker process that runs it under the tag, then kills that process."""
    redis.Redis.from_url(os.environ["TOOLQ_REDIS_URL"]).rpush(f"test:poison:{tag}", os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@tool
async def stall_loop(seconds: float) -> str:
    """Blocks its worker's event loop (no await) for the given seconds, heartbeat and all."""
    time.sleep(seconds)  # noqa: ASYNC251  # the point: a stall of the whole loop
    return "stalled"
