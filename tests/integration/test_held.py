"""worker/held.py on a real Redis: the held set a worker publishes changes by the keys that came or
went, each key counted across the transcripts that share it, and by nothing when nothing did; a
write that failed is sent with the next one; the heartbeat's whole write mends the set."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis as sync_redis
import redis.asyncio as aioredis

from store import keys
from toolq.local import free_port
from worker.held import HeldConversations

WORKER = "w1"


def held_on(redis_url: str, capacity: int) -> tuple[HeldConversations, Callable[..., None], Callable[[], set[str]]]:
    """A HeldConversations, a publish that writes to ``redis_url`` (``whole=`` as the heartbeat
    does), and what the held set in Redis holds."""
    held = HeldConversations(capacity)

    def publish(whole: bool = False, url: str = redis_url) -> None:
        async def go() -> None:
            r = aioredis.Redis.from_url(url)
            try:
                await held.publish(r, WORKER, 10_000, whole=whole)
            finally:
                await r.aclose()

        asyncio.run(go())

    def members() -> set[str]:
        return {m.decode() for m in sync_redis.Redis.from_url(redis_url).smembers(keys.held(WORKER))}

    return held, publish, members


def test_the_published_set_is_the_union_of_the_held_transcripts_keys(redis_url):
    held, publish, members = held_on(redis_url, 2)
    held.record(["sys", "sys+a"])
    held.record(["sys", "sys+b"])
    publish()
    assert members() == {"sys", "sys+a", "sys+b"} == set(held.keys())
    held.record(["sys", "sys+c"])  # the oldest transcript goes; the key they share stays
    publish()
    assert members() == {"sys", "sys+b", "sys+c"} == set(held.keys())
    assert sync_redis.Redis.from_url(redis_url).pttl(keys.held(WORKER)) > 0


def test_running_the_same_transcript_again_changes_nothing(redis_url):
    held, publish, members = held_on(redis_url, 4)
    held.record(["sys", "sys+a"])
    publish()
    sync_redis.Redis.from_url(redis_url).sadd(keys.held(WORKER), "marker")  # seen only if the set is rewritten
    for _ in range(3):
        held.record(["sys", "sys+a"])
        assert not held.changed
        publish()
    assert members() == {"sys", "sys+a", "marker"}


def test_a_continued_conversation_replaces_the_part_it_continues(redis_url):
    held, publish, members = held_on(redis_url, 4)
    held.record(["sys", "sys+a"])
    held.record(["sys", "sys+a", "sys+a+r"])
    publish()
    assert len(held) == 1 and members() == {"sys", "sys+a", "sys+a+r"}


def test_a_key_that_came_and_went_between_publishes_is_not_written(redis_url):
    held, publish, members = held_on(redis_url, 1)
    held.record(["x"])
    publish()
    held.record(["y"])
    held.record(["x"])  # y came and went; x went and came back
    assert not held.changed
    publish()
    assert members() == {"x"}


def test_a_failed_write_is_sent_with_the_next_publish(redis_url):
    held, publish, members = held_on(redis_url, 2)
    held.record(["a"])
    try:
        publish(url=f"redis://127.0.0.1:{free_port()}")  # nothing listens there
    except (sync_redis.ConnectionError, OSError):
        pass
    else:
        raise AssertionError("a publish to a Redis that is not there must fail")
    held.record(["b"])
    publish()
    assert members() == {"a", "b"}


def test_the_heartbeat_writes_the_whole_set_and_a_shrink_drops_the_oldest(redis_url):
    held, publish, members = held_on(redis_url, 3)
    for t in ("a", "b", "c"):
        held.record([t])
    sync_redis.Redis.from_url(redis_url).sadd(keys.held(WORKER), "stale")
    publish(whole=True)
    assert members() == {"a", "b", "c"}
    held.resize(1)
    publish()
    assert members() == {"c"}
