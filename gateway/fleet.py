"""The gateway's view of the live workers, re-read from Redis at most every ``fleet_cache_s``.

Every submit checks the model and tools against it; a short cache keeps a burst of submits from
re-reading the fleet for each one, at the cost of seeing a new or dead worker that much later.
The models the gateway's configuration declares (``TOOLQ_DECLARED_MODELS``) join every snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from store.fleet import Fleet, read_fleet


class FleetView:
    def __init__(
        self,
        redis: Any,
        max_age_s: float,
        on_refresh: Callable[[Fleet], None] | None = None,
        declared: Mapping[str, int] | None = None,
    ):
        self.redis = redis
        self.declared = dict(declared or {})
        self.max_age_s = max_age_s
        self.on_refresh = on_refresh
        self._fleet: Fleet | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> Fleet:
        if self._fleet is not None and time.monotonic() - self._at < self.max_age_s:
            return self._fleet
        async with self._lock:  # one reader refreshes; the others wait for its answer
            if self._fleet is None or time.monotonic() - self._at >= self.max_age_s:
                self._fleet = dataclasses.replace(await read_fleet(self.redis), declared=self.declared)
                self._at = time.monotonic()
                if self.on_refresh:
                    self.on_refresh(self._fleet)
            return self._fleet
