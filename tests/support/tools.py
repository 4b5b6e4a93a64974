"""Tools for worker tests. Each counts its executions in Redis, so a test can prove that a
resumed job did not run a tool a second time, even across worker processes."""

from __future__ import annotations

import asyncio
import os

import redis
import structlog

from toolq.tools import tool


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


@tool
async def counted_zorbix(zorb: int, bix: int) -> int:
    """Calculates the zorbix of two numbers, and counts its runs per job in Redis."""
    job_id = structlog.contextvars.get_contextvars().get("job_id", "unknown")  # bound by worker/jobrun.py
    await asyncio.to_thread(_redis().incr, f"test:ran:zorbix:{job_id}")
    return zorb + bix
