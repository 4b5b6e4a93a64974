"""toolq on a Sentinel-watched Redis: real redis-server processes, a primary, a replica and three
sentinels (tests/support/sentinel_set.py).

- the store, arq's client and the Lua scripts reach the primary through ``redis+sentinel://``,
  and follow it when the primary is SIGKILLed and the replica promoted (scripts loaded again on
  the new primary, which has an empty script cache);
- with ``WAIT`` on, a submission is acknowledged once the replica has it, and refused with
  NotReplicated (the job kept on the primary) when no replica confirms in time; a retry with the
  same idempotency key gets the same job back;
- the gateway refuses an unknown scheme at start with one line naming the schemes it takes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest

from store import keys, redis_urls
from store.arq_link import connect
from store.durability import Durability, NotReplicated
from store.jobstore import JobStore
from store.scripts import Script
from store.submission import Submission
from tests.support.sentinel_set import SentinelSet
from toolq.wire.protocol import EventType, JobRequest, Message

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def sentinels() -> Iterator[SentinelSet]:
    cluster = SentinelSet(down_after_ms=800)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def request(key: str) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="hello")], idempotency_key=key)


def test_submission_waits_for_the_replica_and_is_refused_without_one(sentinels: SentinelSet):
    async def go() -> None:
        store = JobStore(connect(sentinels.url), durability=Durability(replicas=1, timeout_ms=300))
        try:
            job_id, created = await store.submit(Submission(request("k1"), model="m"))
            assert created
            primary = sentinels.primary_port()
            assert primary is not None
            replica = next(s for s in sentinels.servers if s.port != primary)
            assert redis_urls.sync_client(replica.url).exists(keys.job(job_id)) == 1  # WAIT said so
            replica.kill()  # no replica left: nothing can be confirmed
            with pytest.raises(NotReplicated) as e:
                await store.submit(Submission(request("k2"), model="m"))
            assert "0 of the 1 replica(s)" in str(e.value) and e.value.job_id in str(e.value)
            kept = e.value.job_id
            assert (await store.record(kept)).status.value == "queued"  # on the primary, not lost
            replica.extra = ("--replicaof", "127.0.0.1", str(primary))
            replica.start()
            sentinels.wait_replicas(primary, 1)
            again, created = await store.submit(Submission(request("k2"), model="m"))
            assert (again, created) == (kept, False)  # the retry's ack: the same job, now replicated
        finally:
            await store.close()

    asyncio.run(go())


def test_store_and_scripts_follow_a_failover(sentinels: SentinelSet):
    async def go() -> None:
        redis = connect(sentinels.url)
        store = JobStore(redis, durability=Durability())
        try:
            job_id, _ = await store.submit(Submission(request("before"), model="m"))
            sentinels.wait_replicas(sentinels.primary_port() or 0, 1)
            old = sentinels.kill_primary()
            new_port = await asyncio.to_thread(sentinels.wait_promoted, old.port)
            # the same clients, no restart: the pool asks the sentinels for the new primary, and
            # an empty script cache there (flushed to be sure) makes redis-py load the script again
            await redis.script_flush()
            emit = Script(redis, "emit")
            assert await redis.script_exists(emit._script.sha) == [False]
            seq = await store.emit(job_id, EventType.started, {})
            assert seq == 2
            assert (await store.record(job_id)).seq == 2
            info = await redis.info("server")
            assert int(info["tcp_port"]) == new_port
            later, created = await store.submit(Submission(request("after"), model="m"))
            assert created and later != job_id
        finally:
            await store.close()

    asyncio.run(go())


def test_the_gateway_refuses_an_unknown_scheme_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "toolq", "gateway", "--redis", "redis+cluster://h:7000/0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "unknown Redis URL scheme 'redis+cluster://'" in out.stderr
    assert "redis+sentinel://" in out.stderr and "Traceback" not in out.stderr
