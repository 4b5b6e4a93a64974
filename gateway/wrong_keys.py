"""Wrong keys are rate limited per client address, in Redis, so every replica counts together.

Each wrong key (API key on /v1 and /metrics, API or operator key at /ui) adds one to the address's
counter (store/lua/wrong_key.lua); the window starts at the first wrong key. Past
``wrong_key_limit`` wrong keys in ``wrong_key_window_s`` every key from that address gets 429
with Retry-After until the window ends, a right key too: were a newly presented right key let
through, a 429 would only mean "wrong" and guessing would go on at full speed.

But tenants share addresses (a NAT, a proxy, one host running several services), and one tenant's
guesses must not shut out the others. So a key that was right from an address before its lock
keeps working from it during the lock: each right key is remembered as proven from its address
(``toolq:proven-keys:<address>``, a day, written once an hour per replica and pair); a guesser's
key was never proven, so a right guess still gets the 429. The lock is on the address alone, so
an attacker elsewhere cannot lock the owner out; a dashboard session already signed in is not a
key and keeps working. Behind a proxy, run uvicorn with ``--proxy-headers`` (and
``--forwarded-allow-ips``) so the address is the caller's, not the proxy's.

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

from gateway.key_digest import key_digest
from store.wrong_keys import WrongKeyCounts
from toolq.errors import TooManyWrongKeys

T = TypeVar("T")
SUSPECTS = 10_000  # addresses remembered between a wrong key and their window's end
PROVEN_S = 86_400  # how long a right key stays proven from its address
PROVEN_WRITE_S = 3_600  # how often a replica renews one pair (right keys cost no Redis write between)


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class WrongKeys:
    def __init__(self, redis: Any, limit: int, window_s: int):
        self.counts = WrongKeyCounts(redis)
        self.limit = limit
        self.window_s = window_s
        self._suspects: OrderedDict[str, float] = OrderedDict()  # address -> monotonic end of its window
        self._proven: OrderedDict[tuple[str, str], float] = OrderedDict()  # (address, digest) -> next write

    def _refusal(self, left_ms: int) -> TooManyWrongKeys:
        retry = max(1, math.ceil(left_ms / 1000))
        return TooManyWrongKeys(
            f"more than {self.limit} wrong keys from this address in {self.window_s} s "
            f"(wrong_key_limit); every key from it is refused for {retry} s more",
            retry_after_s=retry,
        )

    async def locked_ms(self, address: str) -> int:
        """How long the address stays locked (0: not locked), before any key is looked at."""
        until = self._suspects.get(address)
        if until is None:
            return 0
        if until <= time.monotonic():
            del self._suspects[address]
            return 0
        n, left = await self.counts.current(address)
        return left if n > self.limit else 0

    async def wrong(self, address: str) -> None:
        """Count a wrong key; raise TooManyWrongKeys when it takes the address past the limit."""
        n, left = await self.counts.count(address, self.window_s * 1000)
        self._suspects[address] = time.monotonic() + left / 1000
        self._suspects.move_to_end(address)
        while len(self._suspects) > SUSPECTS:
            self._suspects.popitem(last=False)
        if n > self.limit:
            raise self._refusal(left)

    async def _prove(self, address: str, digest: str) -> None:
        """Remember that this key was right from this address (written at most hourly per pair)."""
        now = time.monotonic()
        pair = (address, digest)
        if self._proven.get(pair, 0.0) > now:
            return
        self._proven[pair] = now + PROVEN_WRITE_S
        self._proven.move_to_end(pair)
        while len(self._proven) > SUSPECTS:
            self._proven.popitem(last=False)
        await self.counts.prove(address, digest, PROVEN_S)

    async def judge(self, request: Request, key: str, lookup: Callable[[], T | None]) -> T | None:
        """Screen the caller's address, then ``lookup()`` the ``key`` it presented; a None answer
        (no such key) is counted. The caller raises its own 401 for that None."""
        address = client_address(request)
        locked = await self.locked_ms(address)
        found = lookup()
        digest = key_digest(key)
        if locked:
            if found is not None and await self.counts.proven(address, digest):
                return found  # a key proven from here before the lock: another tenant's guesses do not stop it
            raise self._refusal(locked)
        if found is None:
            await self.wrong(address)
            return None
        await self._prove(address, digest)
        return found
