"""The tool of the chaos soak (bench/chaos.py): it counts its own executions in Redis.

A tool is not told the id of the call it serves, so the soak gives every job a marker of its own
and the scripted model puts it in the job's one call: ``chaos:ran:<marker>`` then counts how often
that call really ran, across worker processes, kills and Redis restarts. The side effect comes
first and the wait after it, as with an HTTP call whose request has been sent.

Across a failover a count in Redis could itself be lost with the primary, so the failover soak
(bench/chaos_failover.py) sets ``TOOLQ_CHAOS_RUNS_DIR``: each run then appends a line to the file
``<dir>/<marker>`` instead, outside Redis.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from redis.exceptions import RedisError

from store import keys, redis_urls
from toolq.tools import tool

RAN_PREFIX = "chaos:ran:"  # + marker: how many times the call ran
RUNS_PREFIX = "chaos:runs:"  # + marker: one "attempt <n> pid <pid>" entry per run, to diagnose a repeat
RUNS_DIR_ENV = "TOOLQ_CHAOS_RUNS_DIR"


def ran_key(marker: str) -> str:
    return RAN_PREFIX + marker


def runs_key(marker: str) -> str:
    return RUNS_PREFIX + marker


@tool
async def chaos_probe(marker: str, wait_ms: int = 0) -> str:
    """Records that it ran for a marker, waits wait_ms, and says how often it ran."""
    # the job's attempt is bound in the logging context of the task that runs the job (worker/jobrun.py)
    attempt = structlog.contextvars.get_contextvars().get("attempt", "?")
    entry = f"attempt {attempt} pid {os.getpid()}"
    folder = os.environ.get(RUNS_DIR_ENV)
    if folder:
        n = await asyncio.to_thread(_append, Path(folder) / marker, entry)
    else:
        async with redis_urls.async_client(os.environ["TOOLQ_REDIS_URL"]) as r:
            async with r.pipeline(transaction=True) as pipe:
                pipe.incr(ran_key(marker))
                pipe.rpush(runs_key(marker), entry)
                n, _ = await pipe.execute()
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)
    return f"probe {marker} ran {n} times"


def _append(path: Path, entry: str) -> int:
    """Append one run to the marker's file; returns the runs it holds now."""
    with path.open("a", encoding="utf-8") as f:
        f.write(entry + "\n")
    return len(path.read_text(encoding="utf-8").splitlines())


async def wait_for_records(
    r: Any, job_ids: list[str], field: str, done: Callable[[bytes | None], bool], timeout: float, every_s: float = 0.25
) -> bool:
    """Poll one field of each job's record until ``done`` holds for every job (True) or the time is
    up (False). A Redis that is down or failing over is asked again at the next poll: the soaks
    wait through the outages they cause."""
    deadline = time.monotonic() + timeout
    pending = list(job_ids)
    while pending and time.monotonic() < deadline:
        try:
            async with r.pipeline(transaction=False) as pipe:
                for j in pending:
                    pipe.hget(keys.job(j), field)
                values = await pipe.execute()
            pending = [j for j, v in zip(pending, values, strict=True) if not done(v)]
        except (RedisError, OSError):
            pass
        if pending:
            await asyncio.sleep(every_s)
    return not pending


def ended(terminal: bytes | None) -> bool:
    """``done`` for wait_for_records(..., "terminal", ...)."""
    return terminal == b"1"
