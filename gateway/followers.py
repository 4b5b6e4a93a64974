"""Who follows job events through this gateway: at most ``max_followers_per_tenant`` per tenant.

A follower is an SSE stream of a job's events (/v1/jobs/{id}/events, the dashboard's, an OpenAI
stream) or a request that waits for its job's end (a non-streaming chat completion or response).
Each takes a seat before its answer starts, so the cap is a 429 naming it rather than a stream cut
short, and gives it back when it ends: through ``hold``'s ``finally``, through the ``with``
block, or, for a stream whose client left before its first byte (its generator never ran, so no
``finally`` runs), when the generator is collected.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import TypeVar

from toolq.errors import TooManyFollowers

T = TypeVar("T")


class Seats:
    def __init__(self, per_tenant: int, retry_after_s: int):
        self.per_tenant = per_tenant
        self.retry_after_s = retry_after_s
        self.taken: Counter[str] = Counter()

    def take(self, tenant: str) -> Seat:
        """A seat for one follower of ``tenant``, or TooManyFollowers (429) naming the cap."""
        if self.taken[tenant] >= self.per_tenant:
            raise TooManyFollowers(
                f"tenant {tenant!r} already follows {self.taken[tenant]} event streams on this gateway, "
                f"its cap (TOOLQ_MAX_FOLLOWERS_PER_TENANT={self.per_tenant}); close one or retry later",
                retry_after_s=self.retry_after_s,
                field="max_followers_per_tenant",
            )
        self.taken[tenant] += 1
        return Seat(self, tenant)

    def _give_back(self, tenant: str) -> None:
        self.taken[tenant] -= 1
        if self.taken[tenant] <= 0:
            del self.taken[tenant]


class Seat:
    def __init__(self, seats: Seats, tenant: str):
        self._seats = seats
        self.tenant = tenant
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._seats._give_back(self.tenant)

    def hold(self, body: AsyncIterator[T]) -> AsyncIterator[T]:
        """``body`` (a stream's messages), holding this seat until it ends or is collected."""

        async def held() -> AsyncIterator[T]:
            try:
                async for item in body:
                    yield item
            finally:
                self.release()
                if isinstance(body, AsyncGenerator):  # its follower leaves the hub now, not when collected
                    await body.aclose()

        gen = held()
        weakref.finalize(gen, self.release)
        return gen

    def __enter__(self) -> Seat:
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.release()
