"""What store/arq_link.py and worker/pickup.py rely on in arq, checked against the installed arq
over a real Redis.

If an arq release changes the job's stored format (which arq_link writes by its own code, without
importing arq), the queue's sorted set or the poll hook that toolq's worker overrides, these tests
fail before a deployment does. The last test is the promise
to services that already use arq: a job enqueued by a plain arq client runs on a toolq worker.
"""

from __future__ import annotations

import asyncio
import inspect

import msgpack
import pytest
from arq import constants, create_pool
from arq.connections import RedisSettings
from arq.constants import expires_extra_ms, job_key_prefix
from arq.jobs import Job, deserialize_job, serialize_job
from arq.jobs import JobStatus as ArqJobStatus
from arq.worker import Retry as ArqRetry
from arq.worker import Worker, func

from store import arq_link, keys
from store.fair import FairQueue
from store.jobstore import JobStore
from store.submission import Submission
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import EventType, JobRequest, Message
from worker.pickup import WakeableWorker, arq_client, make_worker


def req(text: str = "hi", **kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content=text)], tool_choice="none", **kw)


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    yield s
    await s.close()


@pytest.fixture
async def arq(redis_url):
    """arq's own client, as the worker and other services' arq code use it."""
    client = arq_client(redis_url)
    yield client
    await client.aclose()


def test_the_stored_format_toolq_writes_without_arq_is_arqs():
    # arq_link builds arq's payload and names arq's keys by its own code: byte for byte arq's
    for job_id, attempt, et in (("j1", 1, 1_700_000_000_123), ("x" * 40, 17, 0)):
        ours = arq_link.job_payload(job_id, attempt, et)
        assert ours == serialize_job(arq_link.RUN_JOB, (job_id, attempt), {}, None, et, serializer=arq_link.pack)
    assert (arq_link.JOB_KEY_PREFIX, arq_link.RESULT_KEY_PREFIX, arq_link.IN_PROGRESS_KEY_PREFIX) == (
        constants.job_key_prefix,
        constants.result_key_prefix,
        constants.in_progress_key_prefix,
    )
    assert arq_link.EXPIRES_EXTRA_MS == constants.expires_extra_ms


async def test_an_attempt_enqueued_by_toolq_is_the_job_arq_enqueue_job_writes(store, arq):
    # enqueue_attempt is arq's enqueue_job in one script: the same keys, payload, expiry and score,
    # and like it a no-op while the attempt's job key exists
    await arq_link.enqueue_attempt(store.redis, "j", "m", 2)
    assert await arq.enqueue_job(arq_link.RUN_JOB, "j", 2, _job_id="twin", _queue_name="twin-queue")
    ours, theirs = [arq_link.unpack(await store.redis.get(job_key_prefix + i)) for i in ("j:2", "twin")]
    assert {**ours, "et": 0} == {**theirs, "et": 0}
    assert await store.redis.zscore(keys.queue("m"), "j:2") == ours["et"]
    assert expires_extra_ms - 60_000 < await store.redis.pttl(job_key_prefix + "j:2") <= expires_extra_ms
    assert await arq.enqueue_job(arq_link.RUN_JOB, "j", 2, _job_id="j:2", _queue_name=keys.queue("m")) is None
    await arq_link.enqueue_attempt(store.redis, "j", "m", 2)  # queued already: nothing changes
    assert await store.redis.zrange(keys.queue("m"), 0, -1) == [b"j:2"]
    assert await store.redis.lrange(keys.wake("m"), 0, -1) == [b"j", b"j"]  # a wake token each time


async def run_by_arqs_own_worker(redis_url: str, model: str) -> list[tuple[str, int]]:
    """Run arq's own Worker over the model's queue until it is empty; the (job id, attempt) it ran."""
    seen: list[tuple[str, int]] = []

    async def run_job(ctx, job_id: str, attempt: int) -> str:
        seen.append((job_id, attempt))
        return "ok"

    worker = Worker(
        functions=[func(run_job, name=arq_link.RUN_JOB)],
        queue_name=keys.queue(model),
        redis_pool=arq_client(redis_url),
        burst=True,
        keep_result=0,
        handle_signals=False,
        job_serializer=arq_link.pack,
        job_deserializer=arq_link.unpack,
    )
    try:
        await asyncio.wait_for(worker.async_run(), 10)
    finally:
        await worker.close()
    return seen


async def test_submit_writes_the_job_that_arq_enqueue_job_writes(store, arq):
    job_id, _ = await store.submit(Submission(req(), model="m"))
    ours_id = arq_link.arq_job_id(job_id, 1)
    # the same job, enqueued by arq itself into a queue of its own
    assert await arq.enqueue_job(arq_link.RUN_JOB, job_id, 1, _job_id="twin", _queue_name="twin-queue")

    ours, theirs = [await store.redis.get(job_key_prefix + i) for i in (ours_id, "twin")]
    a, b = arq_link.unpack(ours), arq_link.unpack(theirs)
    assert set(a) == set(b) == {"t", "f", "a", "k", "et"}
    assert {**a, "et": 0} == {**b, "et": 0}
    for raw in (ours, theirs):  # arq's own reader takes both
        d = deserialize_job(raw, deserializer=arq_link.unpack)
        assert (d.function, list(d.args), d.kwargs, d.job_try) == ("run_job", [job_id, 1], {}, None)
    for key in (ours_id, "twin"):
        assert expires_extra_ms - 60_000 < await store.redis.pttl(job_key_prefix + key) <= expires_extra_ms

    # the queue: a sorted set of arq ids scored by the ms from which the job may run
    for queue, member, payload in ((keys.queue("m"), ours_id, a), ("twin-queue", "twin", b)):
        assert await store.redis.type(queue) == b"zset"
        assert await store.redis.zscore(queue, member) == payload["et"]
    job = Job(ours_id, arq, _queue_name=keys.queue("m"), _deserializer=arq_link.unpack)
    assert await job.status() == ArqJobStatus.queued
    # arq sees toolq's job as the job of that id: enqueueing it again does nothing
    assert await arq.enqueue_job(arq_link.RUN_JOB, job_id, 1, _job_id=ours_id, _queue_name=keys.queue("m")) is None


async def test_arqs_own_worker_runs_a_job_toolq_submitted(store, redis_url):
    job_id, _ = await store.submit(Submission(req(), model="m"))
    assert await run_by_arqs_own_worker(redis_url, "m") == [(job_id, 1)]


async def test_a_fair_job_is_stored_as_arq_stores_it_and_queued_only_when_dispatched(redis_url, arq):
    """Fair share (store/fair.py) writes arq's job key at submit and adds the arq id to arq's
    queue at dispatch: arq's own worker then runs it like any job it enqueued."""
    fair = JobStore.from_url(redis_url, fair=True)
    try:
        job_id, _ = await fair.submit(Submission(req(), model="m", tenant="t"))
        arq_id = arq_link.arq_job_id(job_id, 1)
        assert await fair.redis.zcard(keys.queue("m")) == 0
        stored = deserialize_job(await fair.redis.get(job_key_prefix + arq_id), deserializer=arq_link.unpack)
        assert (stored.function, list(stored.args)) == ("run_job", [job_id, 1])
        # arq already counts the stored job as existing: its enqueue_job refuses a twin
        assert await arq.enqueue_job(arq_link.RUN_JOB, job_id, 1, _job_id=arq_id, _queue_name="x") is None
        [d] = await FairQueue(fair.redis).dispatch("m", 1)
        assert d.queued and await fair.redis.zscore(keys.queue("m"), arq_id) is not None
        assert arq_link.stored_job_args() == {"arq_prefix": job_key_prefix, "expires_ms": expires_extra_ms}
        assert await run_by_arqs_own_worker(redis_url, "m") == [(job_id, 1)]
    finally:
        await fair.close()


def test_the_poll_hook_toolq_overrides_is_arqs():
    hook = Worker._poll_iteration
    assert inspect.iscoroutinefunction(hook) and list(inspect.signature(hook).parameters) == ["self"]
    assert "await self._poll_iteration()" in inspect.getsource(Worker.main)  # arq's loop calls it every poll
    assert WakeableWorker._poll_iteration is not hook
    # a look that skips the queue read still does the rest of arq's poll (WakeableWorker._tend)
    for line in (
        "await self._cancel_aborted_jobs()",
        "del self.tasks[job_id]",
        "t.result()",
        "await self.heart_beat()",
    ):
        assert line in inspect.getsource(hook), line

    async def noop() -> None: ...

    async def run(job_id: str, attempt: int) -> str:
        return "ok"

    # every argument make_worker passes is still one of Worker's, and what the hook reads is there
    worker = make_worker(
        model="m",
        worker_id="w1",
        redis_url="redis://127.0.0.1:1/0",
        run=run,
        on_startup=lambda redis: noop(),
        on_shutdown=noop,
        max_jobs=2,
        job_timeout_s=60,
        poll_delay_s=0.5,
        wake=True,
        shutdown_grace_s=1,
        handle_signals=False,
    )
    assert isinstance(worker, Worker) and isinstance(Worker.pool, property)
    for attr in ("poll_delay_s", "allow_pick_jobs", "job_counter", "max_jobs", "tasks", "ctx"):
        assert hasattr(worker, attr), attr
    assert (worker.queue_name, worker.health_check_key, worker.max_jobs) == (keys.queue("m"), keys.health("w1"), 2)
    assert worker.wake_key == keys.wake("m")
    # the in-progress mark a pickup sets, which store/lua/unstall.lua reads the age of
    assert int(worker.in_progress_timeout_s * 1000) == arq_link.in_progress_mark_ms(60)
    assert "psetex(in_progress_key, int(self.in_progress_timeout_s * 1000)" in inspect.getsource(Worker.start_jobs)


async def test_a_job_enqueued_by_a_plain_arq_client_runs(store, redis_url):
    # A toolq job record whose only queue entry comes from another service's arq client.
    job_id, _ = await store.submit(Submission(req("from arq"), model="scripted"))
    ours = arq_link.arq_job_id(job_id, 1)
    await store.redis.zrem(keys.queue("scripted"), ours)
    await store.redis.delete(job_key_prefix + ours)

    worker = WorkerProcess(redis_url, script=write_rules([("from arq", "ran via arq")])).wait_ready()
    client = await create_pool(
        RedisSettings.from_dsn(redis_url), job_serializer=msgpack.packb, default_queue_name=keys.queue("scripted")
    )
    try:
        assert await client.enqueue_job("run_job", job_id, 1)  # toolq's function, (job id, attempt)

        async def events():
            return [e async for e in store.follow(job_id)]

        evs = await asyncio.wait_for(events(), 20)
        assert evs[-1].type == EventType.final and evs[-1].data["content"] == "ran via arq", worker.output()
        assert await store.redis.get(keys.health(worker.worker_id))  # arq's own health check
    finally:
        await client.aclose()
        worker.stop()


def test_the_pickup_toolq_does_in_one_script_is_arqs():
    # WakeableWorker.start_jobs stands in for arq's: the same in-progress mark, then arq's own run_job
    # for each job taken, counted and released the way arq counts and releases its own.
    src = inspect.getsource(Worker.start_jobs)
    assert list(inspect.signature(Worker.start_jobs).parameters) == ["self", "job_ids"]
    for line in (
        "pipe.watch(in_progress_key)",
        "ongoing_exists or not score or score > timestamp_ms()",
        "self.run_job(job_id, int(score))",
        "t.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())",
        "self.tasks[job_id] = t",
        "self.job_counter = self.job_counter + 1",
    ):
        assert line in src, line
    assert WakeableWorker.start_jobs is not Worker.start_jobs


async def test_a_batch_is_taken_once_and_run_by_arqs_run_job(redis_url):
    # Two workers read the same jobs off the queue: each job is taken by one of them, marked in
    # progress as arq marks it, and run; a job whose score lies ahead stays on the queue.
    ran: list[tuple[str, int]] = []
    release = asyncio.Event()  # the jobs hold their slots until the marks are looked at

    async def run(job_id: str, attempt: int) -> str:
        await release.wait()
        ran.append((job_id, attempt))
        return "ok"

    async def noop(*_: object) -> None: ...

    def worker(name: str, max_jobs: int) -> WakeableWorker:
        return make_worker(
            model="m", worker_id=name, redis_url=redis_url, run=run, on_startup=noop, on_shutdown=noop,
            max_jobs=max_jobs, job_timeout_s=60, poll_delay_s=0.5, wake=True, shutdown_grace_s=1,
            handle_signals=False,
        )  # fmt: skip

    pool = arq_client(redis_url)
    a, b, c = worker("a", 2), worker("b", 1), worker("c", 8)
    try:
        for i in range(4):
            await pool.enqueue_job(arq_link.RUN_JOB, f"job_{i}", 1, _job_id=f"job_{i}:1", _queue_name=keys.queue("m"))
        await pool.enqueue_job(
            arq_link.RUN_JOB, "later", 1, _job_id="later:1", _queue_name=keys.queue("m"), _defer_by=60
        )
        ids = [b"job_0:1", b"job_1:1", b"job_2:1", b"job_3:1", b"later:1"]
        await a.start_jobs(ids)  # two free slots: the first two
        await b.start_jobs(ids)  # one free slot: the first not in progress, past those that are
        await c.start_jobs(ids)  # the rest that may run now
        assert sorted(a.tasks) == ["job_0:1", "job_1:1"]
        assert list(b.tasks) == ["job_2:1"] and list(c.tasks) == ["job_3:1"]
        assert (a.job_counter, b.job_counter, c.job_counter) == (2, 1, 1)
        ttl = await pool.pttl("arq:in-progress:job_0:1")
        assert 0 < ttl <= arq_link.in_progress_mark_ms(60)
        release.set()
        await asyncio.gather(*a.tasks.values(), *b.tasks.values(), *c.tasks.values())
        assert sorted(ran) == [("job_0", 1), ("job_1", 1), ("job_2", 1), ("job_3", 1)]
        assert (a.job_counter, b.job_counter, c.job_counter) == (0, 0, 0)  # released as arq releases them
        assert await pool.zrange(keys.queue("m"), 0, -1) == [b"later:1"]  # arq's finish_job took the rest off
        assert not await pool.exists("arq:in-progress:job_0:1")
    finally:
        for p in (pool, a.pool, b.pool, c.pool):
            await p.aclose()


def test_the_run_a_fed_job_shares_with_arqs_run_job_is_arqs():
    # WakeableWorker.run_fed runs a job the feed took as arq's run_job runs it, less run_job's
    # opening read, and ends it with arq's own finish_job, given what run_job would give it.
    src = inspect.getsource(Worker.run_job)
    for line in (
        "result = await asyncio.wait_for(task, timeout_s)",
        "incr_score = e.defer_score + (timestamp_ms() - score)",
        "elif self.retry_jobs and isinstance(e, (asyncio.CancelledError, RetryJob)):",
        "self.finish_job(",
    ):
        assert line in src, line
    assert ArqRetry(defer=0.5).defer_score == 500  # RunAgain's delay, as arq counts it
    assert list(inspect.signature(Worker.finish_job).parameters) == [
        "self", "job_id", "finish", "result_data", "result_timeout_s", "keep_result_forever", "incr_score",
        "keep_in_progress",
    ]  # fmt: skip
    src = inspect.getsource(Worker.finish_job)
    for line in (
        "delete_keys += [in_progress_key]",
        "delete_keys += [retry_key_prefix + job_id, job_key_prefix + job_id]",
        "tr.zrem(self.queue_name, job_id)",
        "tr.zincrby(self.queue_name, incr_score, job_id)",
    ):
        assert line in src, line


async def test_a_fed_job_ends_as_arq_ends_a_job(redis_url):
    # Jobs a feed took (dispatch.lua marked them in progress) run through run_fed: one that ends,
    # or fails, leaves no arq key behind; one that must run again goes back on the queue after its
    # delay; one the worker's shutdown cancels keeps its place for another worker. Each drops its mark.
    ran: list[tuple[str, int]] = []
    hold = asyncio.Event()
    raises = {"again": arq_link.RunAgain(0.3), "broken": RuntimeError("boom")}

    async def run(job_id: str, attempt: int) -> str:
        ran.append((job_id, attempt))
        if job_id == "held":
            await hold.wait()
        if job_id in raises:
            raise raises[job_id]
        return "ok"

    async def noop(*_: object) -> None: ...

    w = make_worker(
        model="m", worker_id="w", redis_url=redis_url, run=run, on_startup=noop, on_shutdown=noop, max_jobs=4,
        job_timeout_s=60, poll_delay_s=0.5, wake=True, shutdown_grace_s=1, handle_signals=False,
    )  # fmt: skip
    pool = arq_client(redis_url)
    names = ["done", "broken", "again", "held"]
    try:
        for name in names:
            await pool.enqueue_job(arq_link.RUN_JOB, name, 2, _job_id=f"{name}:2", _queue_name=keys.queue("m"))
            await pool.psetex(f"arq:in-progress:{name}:2", 60_000, b"1")  # dispatch.lua's mark
        scores = {k.decode(): int(v) for k, v in await pool.zrange(keys.queue("m"), 0, -1, withscores=True)}
        await w._run_taken([(f"{n}:2", scores[f"{n}:2"]) for n in names], fed=True)
        assert w.job_counter == 4
        ended = [w.tasks[f"{n}:2"] for n in names[:3]]
        await asyncio.gather(*ended)
        held = w.tasks["held:2"]
        held.cancel()  # as arq's close does on shutdown
        await asyncio.gather(held, return_exceptions=True)
        assert sorted(ran) == [("again", 2), ("broken", 2), ("done", 2), ("held", 2)]
        assert (w.jobs_complete, w.jobs_failed, w.jobs_retried, w.job_counter) == (1, 1, 2, 0)
        for name in ("done", "broken"):
            assert not await pool.exists(f"arq:job:{name}:2", f"arq:in-progress:{name}:2")
        left = {k.decode(): int(v) for k, v in await pool.zrange(keys.queue("m"), 0, -1, withscores=True)}
        assert sorted(left) == ["again:2", "held:2"]
        assert left["again:2"] >= scores["again:2"] + 300  # run again after its delay
        assert left["held:2"] == scores["held:2"]  # another worker takes it now
        for name in ("again", "held"):
            assert await pool.exists(f"arq:job:{name}:2") and not await pool.exists(f"arq:in-progress:{name}:2")
    finally:
        for p in (pool, w.pool):
            await p.aclose()
