"""Wrong API keys counted per client address, in Redis, so every gateway replica counts together
(the policy, the lock and the proven keys are gateway/wrong_keys.py's): a counter per address
whose window starts at its first wrong key (lua/wrong_key.lua), and the set of key digests proven
right from an address."""

from __future__ import annotations

from typing import Any

from store import keys
from store.scripts import Script


class WrongKeyCounts:
    def __init__(self, redis: Any):
        self.redis = redis
        self._count = Script(redis, "wrong_key")

    async def count(self, address: str, window_ms: int) -> tuple[int, int]:
        """Add one wrong key from the address: (wrong keys in its window, ms left of the window)."""
        n, left = await self._count(counter=keys.wrong_keys(address), window_ms=window_ms)
        return int(n), int(left)

    async def current(self, address: str) -> tuple[int, int]:
        """(wrong keys in the address's window, ms left of it), (0, 0) when it has none."""
        key = keys.wrong_keys(address)
        async with self.redis.pipeline(transaction=False) as pipe:
            n, left = await pipe.get(key).pttl(key).execute()
        return (int(n), int(left)) if n is not None and int(left) > 0 else (0, 0)

    async def prove(self, address: str, digest: str, ttl_s: int) -> None:
        """Remember that the key of this digest was right from this address, for ``ttl_s``."""
        key = keys.proven_keys(address)
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.sadd(key, digest).expire(key, ttl_s).execute()

    async def proven(self, address: str, digest: str) -> bool:
        return bool(await self.redis.sismember(keys.proven_keys(address), digest))
