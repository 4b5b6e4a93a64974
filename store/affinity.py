"""Affinity: a job that continues a conversation is offered first to the worker that holds it.

**What a worker holds.** Each worker keeps the set ``keys.held(worker)`` of the
conversation-prefix keys (store/conversation_keys.py) of the transcripts it ran and still
holds (worker/held.py decides which), changed as it changes and expiring with its registry
entry; its registry entry carries the count and, where its engine says, the bytes per cache tier.
It also writes its load (``keys.worker_load``: jobs running, most jobs) when it fills up or frees a
slot (worker/load.py), so a full worker is seen at once.

**Which worker a job is offered to.** A new job (every front door, gateway/submission.py): the
live worker of its model that holds the longest prefix of its messages (``preferred_worker``),
which covers a chat completion whose messages extend an earlier job's transcript and a Response
with ``previous_response_id`` (its request is that transcript plus the new input). A resumed pause:
the worker that ran the paused attempt (the record's ``worker``, answer.lua). A thread's next run:
the worker that ran its last run, of the same model (the thread's ``holder``, thread_end.lua and
thread_turns.lua). The record keeps
``prefer`` and ``prefer_until`` (now + the wait, ``TOOLQ_AFFINITY_WAIT_MS``), and that worker is
woken on its own wake list.

**How the choice composes with fair share and arq.** Jobs wait in their tenant's set; a worker
with free slots asks store/lua/dispatch.lua, naming itself. Within the tenant whose turn it
is, a job offered to another worker that is live and not full, whose wait has not passed, is left
where it is and the turn goes to the tenant's next job; the preferred worker takes it on its own
next call (it was woken). A job whose worker is gone or full is taken at once (a full worker's job only when the asking
worker can take no other job of the tenant: that one's cache may be here), and any job once
its wait has passed, so affinity never keeps a job from an idle worker past the wait: a worker
that left a job alone looks again when that job's wait ends (``Round.held_until_ms``). The chosen
job goes onto arq's shared queue as before; one placed by affinity is reserved for its worker
there for ``RESERVE_MS`` (``keys.affinity_reserved``, honoured by store/lua/arq_start.lua), so
another worker polling at the same moment does not take it. Each placement is counted
(``placements``) and written to the record's ``placed``. Without fair share (the store's plain
FIFO mode) there is no waiting room to hold a job in, and affinity is off.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from store import keys

DEFAULT_WAIT_MS = 300  # TOOLQ_AFFINITY_WAIT_MS: a few decode steps of a busy worker, a tenth of a cold prefill
MAX_WAIT_MS = 60_000
RESERVE_MS = 2000  # a job placed by affinity is its worker's alone on arq's queue this long
PLACEMENTS = ("affinity", "fallback_wait", "fallback_gone", "fallback_full")


async def publish_held(redis: Any, worker_id: str, held: Sequence[str], ttl_ms: int) -> None:
    """Replace the worker's held set with ``held``; it expires after ``ttl_ms`` unless published again."""
    key = keys.held(worker_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        if held:
            pipe.sadd(key, *held)
            pipe.pexpire(key, ttl_ms)
        await pipe.execute()


async def update_held(redis: Any, worker_id: str, added: Sequence[str], dropped: Sequence[str], ttl_ms: int) -> None:
    """Add and remove keys of the worker's held set, in one round trip (worker/held.py)."""
    key = keys.held(worker_id)
    async with redis.pipeline(transaction=True) as pipe:
        if dropped:
            pipe.srem(key, *dropped)
        if added:
            pipe.sadd(key, *added)
        pipe.pexpire(key, ttl_ms)
        await pipe.execute()


async def report_load(redis: Any, model: str, worker_id: str, running: int, most: int) -> None:
    """The worker's jobs running now and the most it runs at once, read by dispatch.lua."""
    await redis.hset(keys.worker_load(model), worker_id, f"{running} {most}")


async def forget_worker(redis: Any, model: str, worker_id: str) -> None:
    """A worker stopping cleanly: its held set and load go with it."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(keys.held(worker_id))
        pipe.hdel(keys.worker_load(model), worker_id)
        await pipe.execute()


async def prune_load(redis: Any, model: str, live: set[str]) -> None:
    """Drop the load of workers that died without a clean stop (their entries expired)."""
    gone = [w for w in (k.decode() for k in await redis.hkeys(keys.worker_load(model))) if w not in live]
    if gone:
        await redis.hdel(keys.worker_load(model), *gone)


async def preferred_worker(redis: Any, worker_ids: Sequence[str], request_keys: Sequence[str]) -> str | None:
    """The worker among ``worker_ids`` that holds the longest of ``request_keys`` (longest first,
    store.conversation_keys.request_keys); None when none holds any. When several hold that
    prefix (conversations that share a system prompt and tools, the same opening request), one of
    them at random: any serves it from cache, and always the first would send it all their work.
    One round trip."""
    if not worker_ids or not request_keys:
        return None
    async with redis.pipeline(transaction=False) as pipe:
        for w in worker_ids:
            pipe.smismember(keys.held(w), list(request_keys))
        found = await pipe.execute()
    longest = {
        w: next((i for i, hit in enumerate(hits) if hit), None) for w, hits in zip(worker_ids, found, strict=True)
    }
    best = min((i for i in longest.values() if i is not None), default=None)
    if best is None:
        return None
    return random.choice([w for w, i in longest.items() if i == best])


async def placements(redis: Any, model: str) -> dict[str, int]:
    """How dispatch.lua placed the model's jobs that had a preferred worker, so far."""
    raw = await redis.hgetall(keys.affinity_counts(model))
    got = {k.decode(): int(v) for k, v in raw.items()}
    return {p: got.get(p, 0) for p in PLACEMENTS}
