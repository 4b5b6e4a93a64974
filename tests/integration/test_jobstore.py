"""JobStore against a real Redis: seq without gaps, one terminal event, fencing, replay, cancel."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import pytest

from store import keys
from store.jobstore import JobEnded, JobNotFound, JobStore
from store.leases import Leases
from store.submission import Submission
from toolq.wire.protocol import EventType, JobRequest, JobResult, JobStatus, Message


def _request(**kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="hi")], **kw)


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    yield s
    await s.close()


async def test_submit_records_queues_and_announces(store):
    job_id, created = await store.submit(Submission(_request(), model="m"))
    assert created
    assert await store.status(job_id) == JobStatus.queued
    assert [e.type for e in await store.events(job_id)] == [EventType.queued]
    assert await store.redis.zcard(keys.queue("m")) == 1
    assert (await store.request(job_id)).messages[0].content == "hi"


async def test_idempotency_key_returns_the_same_job_per_tenant(store):
    a, created_a = await store.submit(Submission(_request(idempotency_key="k1"), model="m", tenant="t1"))
    b, created_b = await store.submit(Submission(_request(idempotency_key="k1"), model="m", tenant="t1"))
    c, _ = await store.submit(Submission(_request(idempotency_key="k1"), model="m", tenant="t2"))
    assert (a, created_a, created_b) == (b, True, False)
    assert c != a
    assert await store.redis.zcard(keys.queue("m")) == 2


async def test_seq_is_contiguous_and_exactly_one_terminal(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    seqs = await asyncio.gather(*[store.emit(job_id, EventType.token, {"text": str(i)}) for i in range(50)])
    assert sorted(seqs) == list(range(2, 52))
    res = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop", content="ok")
    assert await store.emit(job_id, EventType.final, {"content": "ok"}, result=res) == 52
    with pytest.raises(JobEnded):
        await store.emit(job_id, EventType.error, {"code": "x"})
    with pytest.raises(JobEnded):
        await store.emit(job_id, EventType.token, {"text": "late"})
    events = await store.events(job_id)
    assert [e.seq for e in events] == list(range(1, 53))
    assert sum(e.terminal for e in events) == 1
    assert (await store.result(job_id)).content == "ok"
    assert await store.status(job_id) == JobStatus.succeeded
    assert 0 < await store.redis.ttl(keys.log(job_id)) <= store.event_ttl_s


async def test_attempt_fencing_refuses_a_superseded_worker(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    await store.emit(job_id, EventType.started, attempt=1, status=JobStatus.running, lease_ms=-1)
    leases = Leases(store.redis)
    claimed = await leases.claim_expired("m", grace_ms=5000)
    assert claimed == [(job_id, 2, False)]
    with pytest.raises(JobEnded, match="newer attempt"):
        await store.emit(job_id, EventType.tool_call, {"name": "x"}, attempt=1)
    assert await store.emit(job_id, EventType.started, {"attempt": 2}, attempt=2) == 3
    assert not await leases.renew(job_id, 1, 1000)
    assert await leases.renew(job_id, 2, 1000)
    # an unexpired lease is not claimed again
    assert await leases.claim_expired("m", grace_ms=5000) == []


async def test_follow_replays_then_follows_live_without_duplicates(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    await store.emit(job_id, EventType.started)

    async def produce():
        await asyncio.sleep(0.05)
        for i in range(5):
            await store.emit(job_id, EventType.token, {"text": str(i)})
        res = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop")
        await store.emit(job_id, EventType.final, {}, result=res)

    task = asyncio.create_task(produce())
    seen = [e.seq async for e in store.follow(job_id, after=1)]
    await task
    assert seen == list(range(2, 9))
    # resume from the middle
    assert [e.seq async for e in store.follow(job_id, after=5)] == [6, 7, 8]
    # after the terminal event there is nothing to wait for
    assert await asyncio.wait_for(_drain(store.follow(job_id, after=8)), 2) == []


async def _drain(it):
    return [e async for e in it]


async def test_cancel_queued_job_ends_it_at_once(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    assert await store.cancel(job_id) == JobStatus.cancelled
    events = await store.events(job_id)
    assert events[-1].type == EventType.cancelled
    assert (await store.result(job_id)).finish_reason == "cancelled"


async def test_cancel_running_job_only_sets_the_key(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    await store.emit(job_id, EventType.started, status=JobStatus.running)
    assert await store.cancel(job_id) == JobStatus.running
    assert await store.cancel_requested(job_id)
    assert (await store.events(job_id))[-1].type == EventType.started


async def test_unknown_job_is_not_found(store):
    with pytest.raises(JobNotFound):
        await store.events("job_nope")
    with pytest.raises(JobNotFound):
        await store.status("job_nope")
    with pytest.raises(JobEnded, match="no such job"):
        await store.emit("job_nope", EventType.started)


@asynccontextmanager
async def just_started_redis():
    """A store on a Redis started a moment ago, with two jobs of model ``m`` and Redis's time:
    claim.lua's settle after a start applies to it."""
    from tests.support.redis_server import RedisServer

    server = RedisServer()
    await asyncio.to_thread(server.start)
    store = JobStore.from_url(server.url + "/0")
    try:
        a, _ = await store.submit(Submission(JobRequest(messages=[Message(role="user", content="a")]), model="m"))
        b, _ = await store.submit(Submission(JobRequest(messages=[Message(role="user", content="b")]), model="m"))
        now_ms = int((await store.redis.time())[0]) * 1000
        yield store, Leases(store.redis), a, b, now_ms
    finally:
        await store.close()
        await asyncio.to_thread(server.stop)


async def test_after_a_redis_restart_leases_from_before_it_are_left_to_their_workers():
    """Leases restored from the AOF all ran out while Redis was down; live workers get to renew
    theirs first, and only a lease set (and let lapse) since the start is claimed at once."""
    async with just_started_redis() as (store, leases, old, new, now_ms):
        # a deadline from before this Redis started (as if restored), and one since then
        await store.redis.zadd(keys.LEASES, {old: now_ms - 60_000, new: now_ms - 1})
        claimed = await leases.claim_expired("m", grace_ms=1000, settle_ms=60_000)
        assert [c.job_id for c in claimed] == [new]
        assert [c.job_id for c in await leases.claim_expired("m", grace_ms=1000, settle_ms=0)] == [old]


async def test_after_a_redis_restart_a_lease_handed_back_is_claimed_at_once():
    """A lease handed back on shutdown (deadline 0, store/leases.py) has no worker to renew it, so
    the settle after a start does not hold it back; one from before the start still waits."""
    async with just_started_redis() as (store, leases, held, back, now_ms):
        await store.redis.zadd(keys.LEASES, {held: now_ms - 60_000, back: now_ms + 60_000})
        await leases.release(back)
        assert await store.redis.zscore(keys.LEASES, back) == 0
        claimed = await leases.claim_expired("m", grace_ms=1000, settle_ms=60_000)
        assert [(c.job_id, c.attempt) for c in claimed] == [(back, 2)]
        assert await leases.claim_expired("m", grace_ms=1000, settle_ms=60_000) == []


async def test_the_record_codec_gives_back_every_hash_the_scripts_write(store):
    """submit, emit, pause, answer and the terminal event each write the hash; JobRecord reads each
    state and gives it back field for field (store/records.py)."""
    from store.records import JobRecord
    from tests.support.pauses import paused_job, pending

    async def round_trips(job_id: str) -> JobRecord:
        raw = await store.redis.hgetall(keys.job(job_id))
        rec = await store.record(job_id)
        assert rec.to_hash() == {k.decode(): v.decode() for k, v in raw.items()}
        return rec

    job_id, _ = await store.submit(Submission(_request(), model="m", tenant="t1"))
    rec = await round_trips(job_id)
    assert (rec.status, rec.tenant, rec.model, rec.attempt, rec.seq) == (JobStatus.queued, "t1", "m", 1, 1)
    paused = await paused_job(store, pending("c1", "client"))
    assert (await round_trips(paused)).paused
    await store.answer_actions(paused, [("c1", {"content": "x", "is_error": False})], "client")
    rec = await round_trips(paused)
    assert (rec.status, rec.attempt, rec.actions["c1"]["answer"]) == (
        JobStatus.queued,
        2,
        {"content": "x", "is_error": False},
    )
    res = JobResult(job_id=paused, status=JobStatus.succeeded, finish_reason="stop", content="ok", attempt=2)
    await store.emit(paused, EventType.final, {"content": "ok"}, result=res)
    rec = await round_trips(paused)
    assert rec.terminal and rec.result == res and rec.finished_ms is not None
