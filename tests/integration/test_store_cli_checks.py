"""The store's synchronous checks for the command line, on a real redis-server: whether Redis
answers at a URL (`toolq worker`, `toolq demo`), and which workers are registered (`toolq demo`
waits with it for the worker it started)."""

from __future__ import annotations

import pytest

from store import fleet, keys, redis_urls
from store.arq_link import connect
from store.errors import RedisError
from toolq.local import free_port


def test_ping_and_answers_tell_a_live_redis_from_a_dead_port_and_a_bad_url(redis_url):
    redis_urls.ping(redis_url)
    assert redis_urls.answers(redis_url)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisError):
        redis_urls.ping(dead, timeout_s=1)
    assert not redis_urls.answers(dead)
    with pytest.raises(redis_urls.BadRedisURL):
        redis_urls.ping("nope://x")
    assert not redis_urls.answers("nope://x")


async def test_registered_workers_are_the_live_entries_only(redis_url):
    r = connect(redis_url)
    try:
        await r.flushdb()
        await fleet.register(r, fleet.WorkerInfo(id="w-live", model="m", tools=()), 10_000)
        await fleet.register(r, fleet.WorkerInfo(id="w-gone", model="m", tools=()), 10_000)
        await r.delete(keys.worker("w-gone"))  # its entry expired; the member stays until pruned
        assert await r.sismember(keys.WORKERS, "w-gone")
        assert fleet.registered_workers(redis_url) == {"w-live"}
    finally:
        await r.aclose()
