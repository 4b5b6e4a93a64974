"""Expiring fleet entries: a set of member ids and one hash per member that lives only while
its owner's heartbeat refreshes it. Live workers (``store/fleet.py``) and live tool service
instances (``store/services.py``) are kept this way."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["drop_entry", "read_entries", "tool_specs", "write_entry"]

T = TypeVar("T")


def tool_specs(raw: str | None) -> tuple[dict[str, Any], ...]:
    """An entry's ``tools`` field: the OpenAI function specs in it, leaving out any without a name.
    Raises ValueError when it is not JSON (the entry is then too broken to trust)."""
    return tuple(
        t
        for t in json.loads(raw or "[]")
        if isinstance(t, dict)
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        and t["function"]["name"]
    )


async def write_entry(redis: Any, members: str, key: str, member: str, mapping: dict[str, Any], ttl_ms: int) -> None:
    """Write or refresh one entry; it expires unless refreshed within ``ttl_ms``."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hset(key, mapping=mapping)
        pipe.pexpire(key, ttl_ms)
        pipe.sadd(members, member)
        await pipe.execute()


async def drop_entry(redis: Any, members: str, key: str, member: str) -> None:
    """Remove one entry (its owner stopping cleanly)."""
    await redis.srem(members, member)
    await redis.delete(key)


async def read_entries(
    redis: Any,
    members: str,
    key_of: Callable[[str], str],
    parse: Callable[[dict[bytes, bytes]], T | None],
    *,
    prune: bool = True,
) -> list[T]:
    """The live entries, in member order. Two round trips: the member set, then every hash in one
    pipeline. A member whose hash expired (or cannot be parsed) belongs to a dead owner; with
    ``prune`` it is dropped from the set (a live owner re-adds itself on its next heartbeat, so
    this can never hide one for long)."""
    ids = sorted(m.decode() for m in await redis.smembers(members))
    if not ids:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for member in ids:
            pipe.hgetall(key_of(member))
        hashes = await pipe.execute()
    live, dead = [], []
    for member, h in zip(ids, hashes, strict=True):
        parsed = parse(h) if h else None
        if parsed is None:
            dead.append(member)
        else:
            live.append(parsed)
    if prune and dead:
        await redis.srem(members, *dead)
    return live
