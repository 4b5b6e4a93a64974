"""A journal of effects for tools with no idempotency of their own: ``once(key, fn)`` calls
``fn`` only when no run under the same effect key has recorded a result, and records its result.

The decision to act and the record are two atomic steps in Redis (store/lua/effect_once.lua,
effect_record.lua); the effect itself happens between them, outside Redis, and nothing makes it
atomic with them. What remains:

- acted, then died before recording: the run that takes over after the dead runner's hold sees no
  result and acts again (``runs`` > 1 in the record). A tool closes this edge by handing the key
  to the external system's own idempotency (``Idempotency-Key`` header, a unique column, a
  deduplicating sink): then the second act is a no-op there.
- a record written to a primary that fails over before its replicas have it is lost, and the next
  run acts again: the same edge, closed the same way. With ``TOOLQ_REDIS_WAIT_REPLICAS`` the
  record is sent with WAIT (store/durability.py), which narrows the window to the moment
  between the effect and the record's replication, and the result is returned whatever WAIT says
  (the effect has happened; refusing the result would not undo it).
- a record outlives no more than its TTL; a run after it acts again.

A runner holds the decision for ``hold_s`` (the call's time limit); another run under the same key
waits for it meanwhile, and takes over once it runs out.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from store import keys
from store.durability import Durability
from store.scripts import Script

__all__ = ["DEFAULT_HOLD_S", "DEFAULT_TTL_S", "Journal"]

T = TypeVar("T")

DEFAULT_TTL_S = 7 * 24 * 3600.0  # TOOLQ_EFFECT_JOURNAL_TTL_S in worker/settings.py
DEFAULT_HOLD_S = 60.0  # a call with no time limit
POLL_S = 0.1  # how often a run waiting on another's hold looks again


class Journal:
    def __init__(self, redis: Any, *, ttl_s: float = DEFAULT_TTL_S, durability: Durability | None = None):
        self.redis = redis
        self.ttl_ms = int(ttl_s * 1000)
        self.durability = durability or Durability.from_settings()
        self._once = Script(redis, "effect_once")
        self._record = Script(redis, "effect_record")

    @overload
    async def once(self, key: str, fn: Callable[[], Awaitable[T]], *, hold_s: float | None = None) -> T: ...
    @overload
    async def once(self, key: str, fn: Callable[[], T], *, hold_s: float | None = None) -> T: ...
    async def once(self, key: str, fn: Callable[[], Any], *, hold_s: float | None = None) -> Any:
        """``fn()``'s JSON-able result, recorded under ``key``; a recorded result instead, without
        calling ``fn``. An exception from ``fn`` passes through and records nothing."""
        owner = secrets.token_hex(8)
        hold_ms = int((hold_s or DEFAULT_HOLD_S) * 1000)
        record = keys.effect(key)
        while True:
            got = await self._once(record=record, owner=owner, hold_ms=hold_ms, ttl_ms=self.ttl_ms)
            verdict = _text(got[0])
            if verdict == "done":
                return json.loads(got[1])
            if verdict == "act":
                break
            await asyncio.sleep(POLL_S)  # 'busy': another run holds it, until it records or its hold ends
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
        except BaseException:
            await self._record(record=record, owner=owner, outcome="failed", result="", ttl_ms=self.ttl_ms)
            raise
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        recorded, _ = await self.durability.write(
            self.redis, self._record, record=record, owner=owner, outcome="done", result=text, ttl_ms=self.ttl_ms
        )
        return json.loads(recorded)

    async def runs(self, key: str) -> int:
        """How many runs decided to act under ``key`` (0: none, or the record expired)."""
        return int(await self.redis.hget(keys.effect(key), "runs") or 0)


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
