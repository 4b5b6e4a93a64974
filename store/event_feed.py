"""Every job's events as they are written: the all-jobs channel (``keys.EVENTS_ALL``, on which
emit.lua publishes each event) for a process that watches the whole system, such as the gateway's
metrics (gateway/metrics.py). Pub/sub delivers at most once; a reader that needs every event of a
job follows the job's stream instead (store/event_hub.py)."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from store import keys


class AllEvents:
    """``async with AllEvents(redis) as feed``: subscribed on entry, closed on exit."""

    def __init__(self, redis: Any):
        self._pubsub = redis.pubsub()

    async def __aenter__(self) -> AllEvents:
        await self._pubsub.subscribe(keys.EVENTS_ALL)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._pubsub.aclose()
        except Exception:  # closing a connection that already failed: nothing left to release
            pass

    async def next(self, timeout_s: float) -> bytes | None:
        """The next event's JSON, or None when none came within ``timeout_s``. A timeout rather than
        a blocking listen: each return runs the pool's health check (PING), so a connection that
        died silently is noticed and the error raised here."""
        msg = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout_s)
        if msg and msg.get("type") == "message":
            data: bytes = msg["data"]
            return data
        return None
