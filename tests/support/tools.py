"""Tools for worker tests. Each counts its executions in Redis, so a test can prove that a
resumed job did not run a tool a second time, even across worker processes."""

from __future__ import annotations

import asyncio
import os

import redis

from worker.tools import tool


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TOOLQ_REDIS_URL"])


@tool
def count_me(tag: str) -> str:
    """Counts how often it ran for a tag and returns the count."""
    n = _redis().incr(f"test:ran:{tag}")
    return f"ran {n} times"


@tool
async def nap(seconds: float) -> str:
    """Sleeps, then answers."""
    await asyncio.sleep(seconds)
    return "rested"
