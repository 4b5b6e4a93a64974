"""When each job ended, heard on the fleet-wide event channel (for the throughput benchmarks:
bench/bench_capacity.py, bench/bench_gateway.py): one subscription for a whole run, where
following each job's stream would add a connection and a read per job to what is measured."""

from __future__ import annotations

import asyncio
import json
import time
from types import TracebackType

import redis.asyncio as aioredis

from store import keys

TERMINAL = ("final", "error", "cancelled")


class Endings:
    """``async with Endings(url) as ends``: add each submitted job with ``ends.expect(id)``, then
    ``await ends.all_ended(n, timeout)``; ``ends.at[id]`` is the ``perf_counter`` of its terminal event."""

    def __init__(self, redis_url: str, channel: str = keys.EVENTS_ALL):
        self.channel = channel  # the channel of every job's events (the floor's own in bench_capacity)
        self._redis = aioredis.Redis.from_url(redis_url)
        self._pubsub = self._redis.pubsub()
        self.mine: set[str] = set()
        self.at: dict[str, float] = {}
        self._changed = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Endings:
        await self._pubsub.subscribe(self.channel)
        self._watcher = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        await self._pubsub.aclose()
        await self._redis.aclose()

    def expect(self, job_id: str) -> None:
        self.mine.add(job_id)
        self._changed.set()

    async def all_ended(self, n: int, timeout: float) -> float:
        """Wait until ``n`` expected jobs have all ended; the time the last one did."""
        async with asyncio.timeout(timeout):
            while not (len(self.mine) >= n and self.mine <= self.at.keys()):
                self._changed.clear()
                await self._changed.wait()
        return max(self.at[j] for j in self.mine)

    async def _watch(self) -> None:
        async for msg in self._pubsub.listen():
            if msg["type"] == "message":
                ev = json.loads(msg["data"])
                if ev["type"] in TERMINAL:
                    self.at[ev["job_id"]] = time.perf_counter()
                    self._changed.set()
