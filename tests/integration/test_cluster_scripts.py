"""The scripts docs/architecture/redis.md ("Past one Redis") calls cluster-safe, run through redis-py's
RedisCluster against a real three-primary Redis Cluster (tests/support/redis_cluster.py): a job's
own events (job_event.lua), a tool service's call, result and renewal (service_*.lua) and a
thread's metadata (thread_meta.lua). And one that is not (emit.lua), refused as the table says."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from store import keys
from store.jobstore import JobEnded, JobStore
from store.scripts import Script
from tests.support.redis_cluster import RedisCluster as ClusterServers
from toolq.wire.protocol import EventType, JobStatus, new_job_id


@pytest.fixture(scope="module")
def cluster():
    servers = ClusterServers().start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
async def client(cluster):
    c = RedisCluster.from_url(cluster.url)
    await c.initialize()
    await c.flushall()
    yield c
    await c.aclose()


async def running_job(c: RedisCluster) -> str:
    """A job record as submit.lua and the started event leave it (submit itself is not
    cluster-safe: see the table)."""
    job_id = new_job_id()
    await c.hset(keys.job(job_id), mapping={"status": "running", "attempt": 2, "seq": 2, "tenant": "t"})
    return job_id


async def test_a_jobs_own_events_run_on_a_cluster_with_every_guarantee(cluster, client):
    store = JobStore(client)
    ids = [await running_job(client) for _ in range(12)]
    # the jobs spread over the primaries, each job's keys in one slot
    nodes = {client.get_node_from_key(keys.job(j)).name for j in ids}
    assert len(nodes) >= 2
    assert all(client.keyslot(keys.job(j)) == client.keyslot(keys.log(j)) for j in ids)

    # both channels: PUBLISH reaches a subscriber on any node of the cluster
    sub = aioredis.Redis.from_url(cluster.url)
    ps = sub.pubsub()
    await ps.subscribe(keys.EVENTS_ALL, keys.events_channel(ids[0]))
    await ps.get_message(timeout=1)
    await ps.get_message(timeout=1)
    try:
        for j in ids:
            assert await store.emit(j, EventType.token, {"text": "a"}, attempt=2) == 3
            checkpoint = {"messages": [], "n": 1}
            assert await store.emit(j, EventType.tool_call, {"id": "c1"}, attempt=2, checkpoint=checkpoint) == 4
            assert json.loads(await client.hget(keys.job(j), "checkpoint")) == checkpoint
        got = []
        while len(got) < 2 * len(ids) + 2:  # every job's two on the all-jobs channel, the first job's own two
            msg = await ps.get_message(ignore_subscribe_messages=True, timeout=5)
            assert msg is not None, got
            got.append((msg["channel"].decode(), json.loads(msg["data"])))
        assert sorted(ev["job_id"] for ch, ev in got if ch == keys.EVENTS_ALL) == sorted(ids * 2)
        mine = [(ch, ev["seq"]) for ch, ev in got if ev["job_id"] == ids[0]]
        assert sorted(mine) == [
            (keys.EVENTS_ALL, 3),
            (keys.EVENTS_ALL, 4),
            (keys.events_channel(ids[0]), 3),
            (keys.events_channel(ids[0]), 4),
        ]
    finally:
        await ps.aclose()
        await sub.aclose()

    # replayable: the stream holds seq 3 and 4 under ids <seq>-0
    evs = await store.events(ids[0], after=2)
    assert [(e.seq, e.type) for e in evs] == [(3, EventType.token), (4, EventType.tool_call)]
    # fenced: an older attempt is refused, and so is every write after the terminal event
    with pytest.raises(JobEnded, match="newer attempt"):
        await store.emit(ids[0], EventType.token, {"text": "late"}, attempt=1)
    await client.hset(keys.job(ids[1]), "terminal", "1")
    with pytest.raises(JobEnded, match="already ended"):
        await store.emit(ids[1], EventType.token, {"text": "after"}, attempt=2)
    with pytest.raises(JobEnded, match="expected state"):
        await store.emit(ids[2], EventType.token, {"text": "x"}, attempt=2, only_if_status=JobStatus.queued)
    assert await client.hget(keys.job(ids[0]), "seq") == b"4"  # refusals took no seq


async def test_the_tool_service_scripts_run_on_a_cluster(client):
    call, result, renew = (Script(client, n) for n in ("service_call", "service_result", "service_renew"))
    tool, call_id = "adder", "call_1"
    stream, res, reply = keys.tool_calls(tool), keys.tool_result(tool, call_id), keys.tool_reply(tool, call_id)
    await client.xgroup_create(stream, keys.SERVICE_GROUP, id="0", mkstream=True)
    assert (
        await call(
            calls=stream,
            result=res,
            call_id=call_id,
            arguments='{"a": 1}',
            timeout_ms=5000,
            traceparent=None,
            tracestate=None,
        )
        is None
    )
    (_, entries), *_ = await client.xreadgroup(keys.SERVICE_GROUP, "i1", {stream: ">"}, count=1)
    entry_id = entries[0][0]
    assert await renew(calls=stream, group=keys.SERVICE_GROUP, consumer="i1", entry_id=entry_id) == 1
    assert await renew(calls=stream, group=keys.SERVICE_GROUP, consumer="i2", entry_id=entry_id) == 0
    post = {"calls": stream, "result": res, "reply": reply, "group": keys.SERVICE_GROUP, "entry_id": entry_id}
    assert await result(**post, consumer="i2", call_id=call_id, payload="{}", ttl_ms=60000) == b"not_handed"
    assert await result(**post, consumer="i1", call_id=call_id, payload='{"ok":1}', ttl_ms=60000) == b"accepted"
    assert await client.blpop([reply], timeout=1) == (reply.encode(), b'{"ok":1}')
    # the same call id again gets the accepted result back
    assert (
        await call(
            calls=stream,
            result=res,
            call_id=call_id,
            arguments="{}",
            timeout_ms=5000,
            traceparent=None,
            tracestate=None,
        )
        == b'{"ok":1}'
    )


async def test_a_threads_metadata_runs_on_a_cluster(client):
    meta = Script(client, "thread_meta")
    await client.hset(keys.thread("th_1"), mapping={"tenant": "t", "metadata": "{}"})
    assert await meta(thread=keys.thread("th_1"), tenant="other", metadata='{"x":1}') == -3
    assert await meta(thread=keys.thread("th_1"), tenant="t", metadata='{"x":1}') == 1
    assert await client.hget(keys.thread("th_1"), "metadata") == b'{"x":1}'


async def test_a_script_the_table_calls_unsafe_is_refused(client):
    # emit.lua (terminal, lease, webhook) spans the job's slot and global keys: not one slot
    store = JobStore(client)
    job_id = await running_job(client)
    with pytest.raises((redis.RedisError, redis.exceptions.RedisClusterException), match=r"(?i)slot"):
        await asyncio.wait_for(store.emit(job_id, EventType.started, {}, attempt=2, lease_ms=2000), 10)
