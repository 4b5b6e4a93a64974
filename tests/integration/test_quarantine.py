"""Poison jobs are quarantined (issue 34): the takeover in store/lua/claim.lua bounds the
attempts that lose their worker, over real Redis, then with real worker processes that a poison
tool kills or stalls (tests/support/poison_tools.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis as sync_redis

from store import keys, quarantine
from store.deliveries import Deliveries
from store.jobstore import JobStore
from store.leases import Claim, Leases
from store.submission import Submission
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.payloads import ErrorData
from toolq.wire.protocol import EventType, JobRequest, JobStatus, Message, Webhook


def _request(**kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="hi")], **kw)


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    yield s
    await s.close()


async def _start(store: JobStore, job_id: str, attempt: int, worker: str) -> None:
    """An attempt starts on a worker, with a lease that has already run out (its worker is lost)."""
    data = {"attempt": attempt, "worker": worker}
    await store.start(job_id, attempt=attempt, fresh=data, resumed=data, lease_ms=-1, worker=worker)


async def test_the_third_lost_attempt_quarantines_the_job_and_ends_it_once(store):
    hook = Webhook(url="https://example.com/h", events=["failed"])
    job_id, _ = await store.submit(Submission(_request(webhook=hook), model="m", tenant="t1"))
    leases = Leases(store.redis)
    for attempt, worker in ((1, "w1"), (2, "w2")):
        await _start(store, job_id, attempt, worker)
        assert await leases.claim_expired("m", grace_ms=5000, max_attempts=3) == [Claim(job_id, attempt + 1, False)]
        assert (await store.record(job_id)).status is JobStatus.queued
    await _start(store, job_id, 3, "w3")
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=3) == [Claim(job_id, 4, True)]
    rec = await store.record(job_id)
    assert rec.quarantined and rec.lost_attempts == 3 and not rec.terminal
    assert [(a.attempt, a.worker, a.ended) for a in rec.attempts] == [
        (1, "w1", "lease_expired"),
        (2, "w2", "lease_expired"),
        (3, "w3", "lease_expired"),
    ]
    assert await store.redis.hget(keys.QUARANTINED, "m") == b"1"
    # the old worker is fenced off; that it came back to renew notes its attempt as stalled
    assert not await leases.renew(job_id, 3, 1000)

    assert await quarantine.end_lost(store, job_id, 4)
    assert not await quarantine.end_lost(store, job_id, 4)  # a second claimer finds it ended
    events = await store.events(job_id)
    assert sum(e.terminal for e in events) == 1
    end = events[-1]
    assert end.type is EventType.error
    data = ErrorData.of(end)
    assert data.code == "worker_lost"
    assert "lost on 3 attempts" in data.message and "w3" in data.message
    ends = [(a.worker, a.ended) for a in data.attempts or []]
    assert ends == [("w1", "lease_expired"), ("w2", "lease_expired"), ("w3", "stalled")]
    result = await store.result(job_id)
    assert result.error is not None and result.error.code.value == "worker_lost"
    # ended through the ordinary terminal event: its webhook records a `failed` delivery
    [delivery] = await Deliveries(store.redis).of_job(job_id, "t1")
    assert (delivery.type, delivery.event["data"]["code"]) == ("failed", "worker_lost")
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=3) == []


async def test_attempts_that_never_started_or_were_handed_back_do_not_count(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    leases = Leases(store.redis)
    # settle_ms=0: leases at 0 and 1 predate the Redis a test may have just started (claim.lua)
    # claimed before any worker started it (a pickup lost before `started`, unstall.lua)
    await store.redis.zadd(keys.LEASES, {job_id: 1})
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=1, settle_ms=0) == [Claim(job_id, 2, False)]
    # started, then handed back on shutdown (its lease released to 0)
    await store.start(job_id, attempt=2, fresh={}, resumed={}, lease_ms=60_000, worker="w2")
    await leases.release(job_id)
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=1, settle_ms=0) == [Claim(job_id, 3, False)]
    rec = await store.record(job_id)
    assert [(a.attempt, a.worker, a.ended) for a in rec.attempts] == [(1, "", "not_started"), (2, "w2", "handed_back")]
    assert rec.lost_attempts == 0 and not rec.quarantined
    # a lost attempt after them is the first that counts
    await _start(store, job_id, 3, "w3")
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=1, settle_ms=0) == [Claim(job_id, 4, True)]


async def test_a_quarantine_whose_claimer_died_is_claimed_again_under_the_same_attempt(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    leases = Leases(store.redis)
    await _start(store, job_id, 1, "w1")
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=1, settle_ms=0) == [Claim(job_id, 2, True)]
    # the claimer died before ending it: its short lease runs out
    await store.redis.zadd(keys.LEASES, {job_id: 1})
    assert await leases.claim_expired("m", grace_ms=5000, max_attempts=1, settle_ms=0) == [Claim(job_id, 2, True)]
    assert await store.redis.hget(keys.QUARANTINED, "m") == b"1"  # counted once
    assert len((await store.record(job_id)).attempts) == 1
    assert await quarantine.end_lost(store, job_id, 2)
    assert sum(e.terminal for e in await store.events(job_id)) == 1


async def test_two_claimers_at_once_take_a_lost_attempt_once(store, redis_url):
    jobs = [(await store.submit(Submission(_request(), model="m")))[0] for _ in range(20)]
    for job_id in jobs:
        await _start(store, job_id, 1, "w1")
    others = [JobStore.from_url(redis_url) for _ in range(2)]  # two workers' own connections
    try:
        got = await asyncio.gather(
            *(Leases(o.redis).claim_expired("m", grace_ms=5000, limit=7, max_attempts=1) for o in others),
            Leases(store.redis).claim_expired("m", grace_ms=5000, max_attempts=1),
        )
    finally:
        for o in others:
            await o.close()
    claimed = [c for claims in got for c in claims]
    assert sorted(c.job_id for c in claimed) == sorted(jobs)
    assert all(c.quarantine and c.attempt == 2 for c in claimed)
    assert await store.redis.hget(keys.QUARANTINED, "m") == b"20"


async def test_a_worker_that_comes_back_after_its_lease_notes_its_attempt_stalled(store):
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    leases = Leases(store.redis)
    await _start(store, job_id, 1, "w1")
    await leases.claim_expired("m", grace_ms=5000, max_attempts=3)
    assert not await leases.renew(job_id, 1, 1000)  # its loop ran again: the job is another's now
    assert [(a.worker, a.ended) for a in (await store.record(job_id)).attempts] == [("w1", "stalled")]


# ---------------------------------------------------------------- real worker processes


def _submit(redis_url: str, request: JobRequest) -> str:
    async def run() -> str:
        s = JobStore.from_url(redis_url)
        try:
            return (await s.submit(Submission(request, model="scripted")))[0]
        finally:
            await s.close()

    return asyncio.run(run())


def _events(r: sync_redis.Redis, job_id: str) -> list[dict]:
    return [json.loads(f[b"e"]) for _, f in r.xrange(keys.log(job_id))]


def _wait_terminal(r: sync_redis.Redis, job_id: str, workers: list[WorkerProcess], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while r.hget(keys.job(job_id), "terminal") != b"1":
        assert time.monotonic() < deadline, (_events(r, job_id), [w.output()[-3000:] for w in workers])
        time.sleep(0.1)


def _call(name: str, args: dict) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_a_job_that_kills_every_worker_ends_worker_lost_after_max_attempts(redis_url):
    """Each worker that runs the job's tool is SIGKILLed by it; after TOOLQ_MAX_ATTEMPTS (its
    default, 3) such attempts the next live worker quarantines the job instead of running it.
    (A resumed attempt answers the interrupted call as interrupted and never repeats a call with
    the same arguments, so the scripted model asks for a new round of the tool on each attempt,
    keyed on the round it sees in its prompt: the job kills every worker that takes it.)"""
    tag = f"poison{time.time_ns()}"
    rounds = [f"{tag}-r{n}" for n in (1, 2, 3)]
    rules = [
        (rounds[1], _call("crash_worker", {"tag": rounds[2]})),
        (rounds[0], _call("crash_worker", {"tag": rounds[1]})),
        ("", _call("crash_worker", {"tag": rounds[0]})),
    ]
    tools = ("worker.demo_tools", "tests.support.poison_tools")
    workers = [WorkerProcess(redis_url, script=write_rules(rules), tools=tools) for _ in range(4)]
    try:
        for w in workers:
            w.wait_ready()
        r = sync_redis.Redis.from_url(redis_url)
        job_id = _submit(redis_url, _request(tools=["crash_worker"], max_tokens=200))
        _wait_terminal(r, job_id, workers)
        events = _events(r, job_id)
        killed_pids = [[int(p) for p in r.lrange(f"test:poison:{t}", 0, -1)] for t in rounds]
        assert [len(p) for p in killed_pids] == [1, 1, 1], events
        by_pid = {w.proc.pid: w for w in workers}
        killed = [by_pid[p].worker_id for [p] in killed_pids]
        assert len(set(killed)) == 3  # each attempt killed a different worker
        assert [w.proc.poll() is None for w in workers].count(True) == 1  # the survivor ended it

        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [e["data"]["attempt"] for e in events if e["type"] == "started"] == [1, 2, 3]
        assert [e["data"]["worker"] for e in events if e["type"] == "started"] == killed
        assert sum(e["type"] in ("final", "error", "cancelled") for e in events) == 1
        end = events[-1]
        assert end["type"] == "error" and end["data"]["code"] == "worker_lost", end
        assert "lost on 3 attempts" in end["data"]["message"]
        expected = [{"attempt": n, "worker": w, "ended": "lease_expired"} for n, w in enumerate(killed, 1)]
        assert [{k: a[k] for k in ("attempt", "worker", "ended")} for a in end["data"]["attempts"]] == expected
        assert json.loads(r.hget(keys.job(job_id), "attempts")) == end["data"]["attempts"]
        assert r.hget(keys.job(job_id), "status") == b"failed"
        assert r.hget(keys.QUARANTINED, "scripted") == b"1"
        print(f"\nquarantined {(end['ts'] - events[0]['ts']) / 1000:.1f} s after submission (lease 1.5 s)")
    finally:
        for w in workers:
            w.stop()


def test_a_job_that_stalls_its_workers_loop_past_its_lease_is_quarantined(redis_url):
    """The job's tool blocks the worker's event loop (heartbeat and all) past its lease, as a
    runaway grammar build did: each stall is a lost attempt, and the bound ends the job."""
    # a new round of the tool on the resumed attempt (see the test above): interrupted calls are not repeated
    rules = write_rules(
        [("interrupted", _call("stall_loop", {"seconds": 4.5})), ("", _call("stall_loop", {"seconds": 4}))]
    )
    tools = ("worker.demo_tools", "tests.support.poison_tools")
    env = {"TOOLQ_MAX_ATTEMPTS": "2"}
    workers = [WorkerProcess(redis_url, script=rules, tools=tools, env=env) for _ in range(2)]
    try:
        for w in workers:
            w.wait_ready()
        r = sync_redis.Redis.from_url(redis_url)
        job_id = _submit(redis_url, _request(tools=["stall_loop"], max_tokens=200))
        _wait_terminal(r, job_id, workers)
        events = _events(r, job_id)
        assert sum(e["type"] in ("final", "error", "cancelled") for e in events) == 1
        end = events[-1]
        assert end["type"] == "error" and end["data"]["code"] == "worker_lost", end
        started = [e["data"]["worker"] for e in events if e["type"] == "started"]
        assert len(started) == 2 and set(started) == {w.worker_id for w in workers}
        ends = end["data"]["attempts"]
        assert [(a["attempt"], a["worker"]) for a in ends] == [(1, started[0]), (2, started[1])]
        assert all(a["ended"] in ("lease_expired", "stalled") for a in ends)
        # both workers live on, and each notes its own attempt as stalled once its loop runs again
        deadline = time.monotonic() + 20
        while {a["ended"] for a in json.loads(r.hget(keys.job(job_id), "attempts"))} != {"stalled"}:
            assert time.monotonic() < deadline, r.hget(keys.job(job_id), "attempts")
            time.sleep(0.1)
        assert all(w.proc.poll() is None for w in workers)
    finally:
        for w in workers:
            w.stop()
