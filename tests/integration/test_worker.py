"""The worker as an arq service over real Redis: events, cancel, timeout, crash recovery,
graceful stop and a Redis restart. The model is scripted here (the real one is in tests/e2e)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from contextlib import asynccontextmanager

import pytest
import redis as sync_redis

from store import arq_link, keys
from store.jobstore import JobEnded, JobStore
from store.leases import Leases
from store.submission import Submission
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import EventType, JobRequest, JobStatus, Message
from worker.app import create_worker
from worker.scripted import Rule, ScriptedEngine
from worker.settings import WorkerSettings

CALL_ZORBIX = '<tool_call>{"name": "calculate_zorbix", "arguments": {"zorb": 15, "bix": 7}}</tool_call>'


def req(text: str = "Calculate the zorbix of 15 and 7", **kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content=text)], **kw)


@asynccontextmanager
async def running_worker(redis_url: str, engine: ScriptedEngine, **settings):
    s = WorkerSettings(
        redis_url=redis_url,
        model_name="scripted",
        lease_ms=1500,
        heartbeat_ms=250,
        tool_modules=["worker.demo_tools", "tests.support.tools"],
        **settings,
    )
    worker = create_worker(s, engine, handle_signals=False)
    task = asyncio.create_task(worker.async_run())
    r = sync_redis.Redis.from_url(redis_url)
    for _ in range(250):
        if r.exists(keys.worker(worker.ctx["worker_id"])):
            break
        await asyncio.sleep(0.02)
    try:
        yield worker
    finally:
        await worker.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    yield s
    await s.close()


async def events_of(store: JobStore, job_id: str, timeout: float = 20):
    async def collect():
        return [e async for e in store.follow(job_id)]

    return await asyncio.wait_for(collect(), timeout)


async def test_job_events_in_order_with_contiguous_seq(redis_url, store):
    engine = ScriptedEngine([Rule("<tool_response>\\n", "The zorbix is 22."), Rule("", CALL_ZORBIX)])
    async with running_worker(redis_url, engine):
        job_id, _ = await store.submit(Submission(req(tools=["calculate_zorbix"]), model="scripted"))
        evs = await events_of(store, job_id)
    assert [e.type for e in evs] == [
        EventType.queued,
        EventType.started,
        EventType.tool_call,
        EventType.tool_result,
        EventType.final,
    ]
    assert [e.seq for e in evs] == [1, 2, 3, 4, 5]
    assert evs[2].data["arguments"] == {"zorb": 15, "bix": 7}
    assert evs[3].data["content"] == "22"
    result = await store.result(job_id)
    assert result.status == JobStatus.succeeded and result.content == "The zorbix is 22."
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.timings.total_ms >= result.timings.tools_ms >= 0
    # the stream expires after the terminal event
    assert 0 < await store.redis.ttl(keys.log(job_id))


async def test_one_cancel_among_running_jobs_stops_that_job_alone(redis_url, store):
    from worker.cancel import CANCEL_POLL_S

    engine = ScriptedEngine([Rule("LONG", "x" * 100000)], token_delay_s=0.002)
    async with running_worker(redis_url, engine, max_jobs=3):
        jobs = [
            (await store.submit(Submission(req(f"LONG {i}", tool_choice="none", max_tokens=400), model="scripted")))[0]
            for i in range(3)
        ]
        for j in jobs:
            async for ev in store.follow(j):
                if ev.type == EventType.started:
                    break
        await asyncio.sleep(4 * CANCEL_POLL_S)  # the worker's one watch has looked at all three
        t0 = time.perf_counter()
        await store.cancel(jobs[1])
        evs = await events_of(store, jobs[1])
        assert evs[-1].type == EventType.cancelled and time.perf_counter() - t0 < 0.25
        for j in (jobs[0], jobs[2]):
            assert (await events_of(store, j))[-1].type == EventType.final


async def test_fleet_entry_and_pruning_of_dead_workers(redis_url, store):
    await store.redis.sadd(keys.WORKERS, "ghost")  # a worker that died: no hash any more
    async with running_worker(redis_url, ScriptedEngine(["x"])) as worker:
        wid = worker.ctx["worker_id"]
        h = await store.redis.hgetall(keys.worker(wid))
        assert h[b"model"] == b"scripted" and json.loads(h[b"tools"])[0]["type"] == "function"
        assert 0 < await store.redis.pttl(keys.worker(wid)) <= 3000
        for _ in range(50):  # pruned within a heartbeat or two
            if await store.redis.smembers(keys.WORKERS) == {wid.encode()}:
                break
            await asyncio.sleep(0.05)
        assert await store.redis.smembers(keys.WORKERS) == {wid.encode()}


async def test_token_events_when_asked(redis_url, store):
    engine = ScriptedEngine(["A streamed answer that is long enough to come in pieces."], token_delay_s=0.002)
    async with running_worker(redis_url, engine):
        job_id, _ = await store.submit(Submission(req(stream_tokens=True, tool_choice="none"), model="scripted"))
        evs = await events_of(store, job_id)
    tokens = [e for e in evs if e.type == EventType.token]
    assert tokens and "".join(e.data["text"] for e in tokens) == evs[-1].data["content"]
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))


async def test_cancel_mid_generation_stops_within_250ms(redis_url, store):
    engine = ScriptedEngine([Rule("STOP ME", "x" * 100000), Rule("", "next job answer")], token_delay_s=0.002)
    async with running_worker(redis_url, engine):
        job_id, _ = await store.submit(
            Submission(req("STOP ME", tool_choice="none", max_tokens=30000), model="scripted")
        )
        async for ev in store.follow(job_id):
            if ev.type == EventType.started:
                break
        await asyncio.sleep(0.2)
        t0 = time.perf_counter()
        await store.cancel(job_id)
        evs = await events_of(store, job_id)
        elapsed = time.perf_counter() - t0
        assert evs[-1].type == EventType.cancelled
        assert elapsed < 0.25, f"cancel took {elapsed * 1000:.0f} ms"
        assert (await store.result(job_id)).finish_reason == "cancelled"
        # the worker takes the next job
        nxt, _ = await store.submit(Submission(req("again", tool_choice="none"), model="scripted"))
        assert (await events_of(store, nxt))[-1].type == EventType.final


async def test_timeout_stops_the_model_and_fails_the_job(redis_url, store):
    engine = ScriptedEngine([Rule("SLOW", "y" * 100000), Rule("", "fast")], token_delay_s=0.002)
    async with running_worker(redis_url, engine):
        job_id, _ = await store.submit(
            Submission(req("SLOW", tool_choice="none", max_tokens=30000, timeout_s=0.5), model="scripted")
        )
        t0 = time.perf_counter()
        evs = await events_of(store, job_id)
        assert time.perf_counter() - t0 < 2.0
        assert evs[-1].type == EventType.error and evs[-1].data["code"] == "timeout"
        result = await store.result(job_id)
        assert result.finish_reason == "timeout" and result.error.code.value == "timeout"
        nxt, _ = await store.submit(Submission(req("quick", tool_choice="none"), model="scripted"))
        assert (await events_of(store, nxt))[-1].type == EventType.final


async def test_a_live_worker_that_lost_its_lease_stands_down_and_the_job_resumes(redis_url, store):
    # As after a network partition: the job is claimed by a reaper while its worker still runs it.
    engine = ScriptedEngine(["done " * 200], token_delay_s=0.005)
    async with running_worker(redis_url, engine):
        job_id, _ = await store.submit(Submission(req("hi", tool_choice="none"), model="scripted"))
        async for ev in store.follow(job_id):
            if ev.type == EventType.started:
                break
        # a lease that ran out just now (one from before Redis started would be left to settle)
        await store.redis.zadd(keys.LEASES, {job_id: int((await store.redis.time())[0]) * 1000 - 1})
        [(claimed, attempt, _)] = await Leases(store.redis).claim_expired("scripted", grace_ms=5000)
        assert (claimed, attempt) == (job_id, 2)
        await arq_link.enqueue_attempt(store.redis, job_id, "scripted", attempt)
        evs = await events_of(store, job_id)
    assert [(e.type, e.data.get("attempt")) for e in evs if e.type == EventType.started] == [
        (EventType.started, 1),
        (EventType.started, 2),
    ]
    assert evs[-1].type == EventType.final and sum(e.terminal for e in evs) == 1
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))


async def test_unknown_tool_fails_with_a_typed_error(redis_url, store):
    async with running_worker(redis_url, ScriptedEngine(["never used"])):
        job_id, _ = await store.submit(Submission(req(tools=["no_such_tool"]), model="scripted"))
        evs = await events_of(store, job_id)
    assert evs[-1].type == EventType.error and evs[-1].data["code"] == "unknown_tool"
    assert "no_such_tool" in evs[-1].data["message"]


async def test_context_length_exceeded_is_an_error_event(redis_url, store):
    async with running_worker(redis_url, ScriptedEngine(["x"], n_ctx=50)):
        job_id, _ = await store.submit(Submission(req("word " * 500, tool_choice="none"), model="scripted"))
        evs = await events_of(store, job_id)
    assert evs[-1].data["code"] == "context_length_exceeded"


def _follow_sync(store_url: str, job_id: str, timeout: float = 30):
    async def run():
        s = JobStore.from_url(store_url)
        try:
            return await events_of(s, job_id, timeout)
        finally:
            await s.close()

    return asyncio.run(run())


def test_sigkill_mid_job_is_resumed_by_another_worker_without_rerunning_the_tool(redis_url):
    tag = f"kill{time.time_ns()}"
    rules = write_rules(
        [
            ("<tool_response>\\n", "z" * 3000),  # about 2.3 s of answer after the tool's result
            ("", f'<tool_call>{{"name": "count_me", "arguments": {{"tag": "{tag}"}}}}</tool_call>'),
        ],
        token_delay_s=0.003,
    )
    # Both workers are up before the job exists: starting the second one only once the job was
    # under way raced its answer (a worker takes seconds to start on a loaded machine, and the
    # first one could finish the job before it was killed). Whichever takes the job is killed.
    workers = [WorkerProcess(redis_url, script=rules) for _ in range(2)]
    for w in workers:
        w.wait_ready()
    r = sync_redis.Redis.from_url(redis_url)

    async def submit():
        s = JobStore.from_url(redis_url)
        try:
            return (await s.submit(Submission(req("go", tools=["count_me"], max_tokens=2000), model="scripted")))[0]
        finally:
            await s.close()

    try:
        job_id = asyncio.run(submit())
        deadline = time.monotonic() + 20
        while not any(json.loads(x[1][b"e"])["type"] == "tool_result" for x in r.xrange(keys.log(job_id))):
            assert time.monotonic() < deadline, [w.output() for w in workers]
            time.sleep(0.02)
        time.sleep(0.2)  # well into the slow answer
        first_start = next(e for _, f in r.xrange(keys.log(job_id)) if (e := json.loads(f[b"e"]))["type"] == "started")
        owner = next(w for w in workers if w.worker_id == first_start["data"]["worker"])
        owner.kill()
        killed_at = time.monotonic()
        assert r.hget(keys.job(job_id), "terminal") != b"1", "the job ended before its worker was killed"
        evs = _follow_sync(redis_url, job_id)
        restarted = [e for e in evs if e.type == EventType.started]
        assert [e.data["attempt"] for e in restarted] == [1, 2]
        assert restarted[1].data["worker"] != owner.worker_id
        assert evs[-1].type == EventType.final
        assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
        assert r.get(f"test:ran:{tag}") == b"1"  # the tool ran once
        assert sum(e.type == EventType.tool_result for e in evs) == 1
        # resumed from the checkpoint: the second attempt started within 5 s of the kill
        resumed_ts = restarted[1].ts / 1000
        assert resumed_ts - (time.time() - (time.monotonic() - killed_at)) < 5
    finally:
        for w in workers:
            w.stop()


def test_sigterm_hands_the_running_job_back(redis_url):
    rules = write_rules([("", "w" * 20000)], token_delay_s=0.003)
    first = WorkerProcess(redis_url, script=rules, env={"TOOLQ_SHUTDOWN_GRACE_S": "0.5"}).wait_ready()

    async def submit():
        s = JobStore.from_url(redis_url)
        try:
            return (await s.submit(Submission(req("long", tool_choice="none", max_tokens=20000), model="scripted")))[0]
        finally:
            await s.close()

    job_id = asyncio.run(submit())
    r = sync_redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 20
    while r.hget(keys.job(job_id), "status") != b"running":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(20) == 0
    # nothing terminal was published; the job waits to be resumed
    types = [json.loads(x[1][b"e"])["type"] for x in r.xrange(keys.log(job_id))]
    assert types == ["queued", "started"], types
    second = WorkerProcess(redis_url, script=write_rules([("", "done")])).wait_ready()
    try:
        evs = _follow_sync(redis_url, job_id)
        assert evs[-1].type == EventType.final and evs[-1].data["content"] == "done"
    finally:
        second.stop()


def test_worker_survives_a_redis_restart(own_redis):
    url = own_redis.url + "/0"
    worker = WorkerProcess(url, script=write_rules([("", "still here")])).wait_ready()
    try:
        own_redis.stop()
        time.sleep(1.5)
        own_redis.start()
        assert worker.proc.poll() is None, worker.output()

        async def run():
            s = JobStore.from_url(url)
            try:
                job_id, _ = await s.submit(Submission(req("after restart", tool_choice="none"), model="scripted"))
                return await events_of(s, job_id, 30)
            finally:
                await s.close()

        evs = asyncio.run(run())
        assert evs[-1].type == EventType.final and evs[-1].data["content"] == "still here"
    finally:
        worker.stop()


def _taken_but_never_started(redis_url: str, model: str, *, ago_ms: int) -> str:
    """A queued job of ``model`` whose attempt 1 arq marked in progress ``ago_ms`` ago, as a
    worker's pickup does, with no `started` after it."""
    from arq.constants import in_progress_key_prefix

    async def submit() -> str:
        s = JobStore.from_url(redis_url)
        try:
            return (await s.submit(Submission(req("go", tool_choice="none"), model=model)))[0]
        finally:
            await s.close()

    job_id = asyncio.run(submit())
    full = arq_link.in_progress_mark_ms(WorkerSettings().queue_timeout_s)
    mark = in_progress_key_prefix + arq_link.arq_job_id(job_id, 1)
    sync_redis.Redis.from_url(redis_url).psetex(mark, full - ago_ms, b"1")
    return job_id


def test_a_job_a_lost_worker_took_but_never_started_runs_again(redis_url):
    """arq marks a job in progress when a worker takes it; a worker killed before `started` leaves
    that mark for an hour. A live worker hands the job to the lease reaper, and it runs as a new
    attempt (which would fence off its first picker, were that one only slow)."""
    job_id = _taken_but_never_started(redis_url, "stalled", ago_ms=15_000)  # by a worker that then died
    w = WorkerProcess(redis_url, script=write_rules([("", "done")]), name="stalled").wait_ready()
    try:
        t0 = time.monotonic()
        evs = _follow_sync(redis_url, job_id)
        assert evs[-1].type == EventType.final and [
            e.data.get("attempt") for e in evs if e.type == EventType.started
        ] == [2]
        assert time.monotonic() - t0 < 10
        assert "releasing a job a lost worker took but never started" in w.output()
    finally:
        w.stop()


def test_a_slow_first_picker_of_a_handed_over_job_is_fenced_off(redis_url):
    """The pickup handed over after seconds may only have been slow: once the job runs as a new
    attempt, the first picker's `started` (attempt 1) is refused, so attempt 1 never runs beside it."""
    from worker.events import EventLog

    job_id = _taken_but_never_started(redis_url, "slowpick", ago_ms=5_000)
    # attempt 2 generates for about two seconds: the slow picker comes back while it runs
    rules = write_rules([("", "abcd" * 10)], token_delay_s=0.2)
    w = WorkerProcess(redis_url, script=rules, name="slowpick").wait_ready()
    try:

        async def late_start() -> str:
            s = JobStore.from_url(redis_url)
            try:
                async for ev in s.follow(job_id):
                    if ev.type == EventType.started:
                        assert ev.data["attempt"] == 2, w.output()
                        break
                try:
                    await EventLog(s, job_id, 1, lease_ms=2000).started(worker_id="slow", model="slowpick")
                except JobEnded as e:
                    return e.reason
                return "written"
            finally:
                await s.close()

        assert asyncio.run(asyncio.wait_for(late_start(), 30)) == "taken over by a newer attempt"
        evs = _follow_sync(redis_url, job_id)
        assert evs[-1].type == EventType.final
        assert [e.data.get("attempt") for e in evs if e.type == EventType.started] == [2]
    finally:
        w.stop()
