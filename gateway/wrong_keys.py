"""Wrong keys are rate limited per client address, in Redis, so every replica counts together.

Each wrong key (API key on /v1 and /metrics, API or operator key at /ui) adds one to the address's
counter (toolq/store/lua/wrong_key.lua); the window starts at the first wrong key. Past
``wrong_key_limit`` wrong keys in ``wrong_key_window_s`` every key from that address, right or
wrong, gets 429 with Retry-After until the window ends. A right key must be refused too: were it
let through, a 429 would only mean "wrong" and guessing would go on at full speed. The lock is on
the address alone, so an attacker elsewhere cannot lock the owner out; a dashboard session
already signed in is not a key and keeps working. Behind a proxy, run uvicorn with
``--proxy-headers`` (and ``--forwarded-allow-ips``) so the address is the caller's, not the proxy's.

Right keys cost no Redis read: an address is looked up only once this replica has seen a wrong
key from it in the window (``_suspects``, bounded), and each replica sees one at the latest on
the first wrong key sent to it.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request

from toolq.errors import TooManyWrongKeys
from toolq.store import keys
from toolq.store.scripts import Script

T = TypeVar("T")
SUSPECTS = 10_000  # addresses remembered between a wrong key and their window's end


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class WrongKeys:
    def __init__(self, redis: Any, limit: int, window_s: int):
        self.redis = redis
        self.limit = limit
        self.window_s = window_s
        self._count = Script(redis, "wrong_key")
        self._suspects: OrderedDict[str, float] = OrderedDict()  # address -> monotonic end of its window

    def _refusal(self, left_ms: int) -> TooManyWrongKeys:
        retry = max(1, math.ceil(left_ms / 1000))
        return TooManyWrongKeys(
            f"more than {self.limit} wrong keys from this address in {self.window_s} s "
            f"(wrong_key_limit); every key from it is refused for {retry} s more",
            retry_after_s=retry,
        )

    async def screen(self, address: str) -> None:
        """Raise TooManyWrongKeys when the address is past its limit, before any key is looked at."""
        until = self._suspects.get(address)
        if until is None:
            return
        if until <= time.monotonic():
            del self._suspects[address]
            return
        key = keys.wrong_keys(address)
        async with self.redis.pipeline(transaction=False) as pipe:
            n, left = await pipe.get(key).pttl(key).execute()
        if n is not None and int(n) > self.limit and left > 0:
            raise self._refusal(left)

    async def wrong(self, address: str) -> None:
        """Count a wrong key; raise TooManyWrongKeys when it takes the address past the limit."""
        n, left = await self._count(counter=keys.wrong_keys(address), window_ms=self.window_s * 1000)
        self._suspects[address] = time.monotonic() + left / 1000
        self._suspects.move_to_end(address)
        while len(self._suspects) > SUSPECTS:
            self._suspects.popitem(last=False)
        if int(n) > self.limit:
            raise self._refusal(int(left))

    async def judge(self, request: Request, lookup: Callable[[], T | None]) -> T | None:
        """Screen the caller's address, then ``lookup()`` the key it presented; a None answer
        (no such key) is counted. The caller raises its own 401 for that None."""
        address = client_address(request)
        await self.screen(address)
        found = lookup()
        if found is None:
            await self.wrong(address)
        return found
