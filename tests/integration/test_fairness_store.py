"""The fair choice of the next job (store/fair.py, dispatch.lua) over a real Redis, without
workers: shares by weight, the idle rule, priorities, running caps, cancel while waiting, the
queue-depth limit and usage counted once. tests/integration/test_fairness.py runs the same
promises through real worker processes and gateways."""

from __future__ import annotations

from collections import Counter

import pytest

from store import keys
from store.admission import QueueBounds, TenantQueueAtLimit
from store.fair import FairQueue
from store.jobstore import JobEnded, JobStore, QueueAtLimit
from store.submission import Submission
from store.threads import ThreadStore
from store.usage import read_usage
from toolq.tenants import TenantPolicy
from toolq.wire.protocol import EventType, JobRequest, JobResult, JobStatus, Message, Usage

MODEL = "m"


def req(text: str = "hi", **kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content=text)], **kw)


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url, fair=True)
    yield s
    await s.close()


async def submit_many(store: JobStore, tenant: str, n: int, policy: TenantPolicy | None = None, **kw) -> list[str]:
    return [(await store.submit(Submission(req(**kw), model=MODEL, tenant=tenant, policy=policy)))[0] for _ in range(n)]


async def dispatch_one_at_a_time(fair: FairQueue, n: int) -> list[str]:
    tenants = []
    for _ in range(n):
        got = await fair.dispatch(MODEL, 1)
        if not got:
            break
        tenants.append(got[0].tenant)
    return tenants


async def test_a_submitted_job_waits_for_dispatch_and_then_is_on_arqs_queue(store):
    job_id, _ = await store.submit(Submission(req(), model=MODEL, tenant="a"))
    assert await store.redis.zcard(keys.queue(MODEL)) == 0
    assert await FairQueue(store.redis).waiting(MODEL) == {"a": 1}
    [d] = await FairQueue(store.redis).dispatch(MODEL, 4)
    assert (d.job_id, d.tenant, d.attempt, d.queued) == (job_id, "a", 1, True)
    assert await store.redis.zscore(keys.queue(MODEL), f"{job_id}:1") is not None
    assert await FairQueue(store.redis).waiting(MODEL) == {}
    assert await FairQueue(store.redis).dispatch(MODEL, 4) == []


async def test_a_flood_does_not_delay_another_tenants_job(store):
    fair = FairQueue(store.redis)
    await submit_many(store, "a", 50)
    assert await dispatch_one_at_a_time(fair, 5) == ["a"] * 5
    await submit_many(store, "b", 1)
    # b enters level with the virtual time; a's pass is already past it
    assert await dispatch_one_at_a_time(fair, 2) == ["b", "a"]


async def test_weights_give_shares_whatever_the_backlog(store):
    fair = FairQueue(store.redis)
    await submit_many(store, "a", 330, TenantPolicy(weight=3))
    await submit_many(store, "b", 120, TenantPolicy(weight=1))
    counts = Counter(await dispatch_one_at_a_time(fair, 400))
    assert abs(counts["a"] / 400 - 0.75) <= 0.05, counts
    assert abs(counts["b"] / 400 - 0.25) <= 0.05, counts


async def test_an_idle_tenant_is_not_credited_for_its_idle_time(store):
    fair = FairQueue(store.redis)
    await submit_many(store, "a", 200)
    await submit_many(store, "b", 1)
    assert Counter(await dispatch_one_at_a_time(fair, 101)) == {"a": 100, "b": 1}
    # b was idle while a started 100: it comes back level, alternating, not 100 in a row
    await submit_many(store, "b", 50)
    assert Counter(await dispatch_one_at_a_time(fair, 20)) == {"a": 10, "b": 10}


async def test_emptying_and_refilling_gains_nothing(store):
    fair = FairQueue(store.redis)
    await submit_many(store, "a", 100)
    order = []
    for _ in range(20):  # b submits one job at a time, each after its previous one started
        await submit_many(store, "b", 1)
        order += await dispatch_one_at_a_time(fair, 2)
    assert Counter(order) == {"a": 20, "b": 20}


async def test_a_batch_line_takes_only_a_free_engine_slot(store):
    """A ``spare`` job (a batch line) is never given to a worker's interactive reserve: with no
    free slot it waits, its tenant keeps its pass, and the worker is told a line waits; another
    tenant's job behind it is taken into the reserve at once."""
    fair = FairQueue(store.redis)
    line, _ = await store.submit(Submission(req(), model=MODEL, tenant="a", spare=True))
    full = await fair.dispatch_for(MODEL, 1, worker="w1", slots_free=0)
    assert (full.chosen, full.spare_left) == ([], True)
    assert await fair.waiting(MODEL) == {"a": 1}
    [interactive] = await submit_many(store, "b", 1)
    taken = await fair.dispatch_for(MODEL, 1, worker="w1", slots_free=0)
    assert [d.job_id for d in taken.chosen] == [interactive]
    # a free slot takes the line, and one slot takes one line of two, however many are wanted
    second, _ = await store.submit(Submission(req(), model=MODEL, tenant="a", spare=True))
    one = await fair.dispatch_for(MODEL, 2, worker="w1", slots_free=1)
    assert ([d.job_id for d in one.chosen], one.spare_left) == ([line], True)
    rest = await fair.dispatch_for(MODEL, 1, worker="w1", slots_free=1)
    assert ([d.job_id for d in rest.chosen], rest.spare_left) == ([second], False)


async def test_priority_orders_a_tenants_own_jobs(store):
    fair = FairQueue(store.redis)
    low = await submit_many(store, "a", 2, priority=0)
    high = await submit_many(store, "a", 2, priority=9)
    mid = await submit_many(store, "a", 1, priority=5)
    got = [d.job_id for d in await fair.dispatch(MODEL, 5)]
    assert got == [*high, *mid, *low]


async def test_priority_does_not_change_whose_turn_it_is(store):
    fair = FairQueue(store.redis)
    await submit_many(store, "a", 40, priority=9)
    await submit_many(store, "b", 40, priority=0)
    assert Counter(await dispatch_one_at_a_time(fair, 40)) == {"a": 20, "b": 20}


async def test_a_running_cap_holds_and_frees_as_jobs_end(store):
    fair = FairQueue(store.redis)
    capped = TenantPolicy(max_running=2)
    a_jobs = await submit_many(store, "a", 5, capped)
    await submit_many(store, "b", 5)
    got = Counter(d.tenant for d in await fair.dispatch(MODEL, 10))
    assert got == {"a": 2, "b": 5}
    assert await fair.running(["a", "b"]) == {"a": 2, "b": 5}
    # one of a's ends: one more of a's may start
    result = JobResult(job_id=a_jobs[0], status=JobStatus.succeeded, finish_reason="stop")
    await store.emit(a_jobs[0], EventType.final, {}, result=result)
    assert [d.job_id for d in await fair.dispatch(MODEL, 10)] == [a_jobs[2]]


async def test_a_cancelled_waiting_job_never_starts(store):
    fair = FairQueue(store.redis)
    jobs = await submit_many(store, "a", 3)
    assert await store.cancel(jobs[1]) == JobStatus.cancelled
    # like a cancelled job on arq's queue, it counts until the dispatcher drops it
    assert await fair.waiting(MODEL) == {"a": 3}
    assert [d.job_id for d in await fair.dispatch(MODEL, 5)] == [jobs[0], jobs[2]]
    assert await fair.waiting(MODEL) == {}


async def test_the_queue_depth_limit_counts_waiting_jobs(store):
    """A full queue refuses the tenant that filled it (its share), not the others."""
    for _ in range(3):
        await store.submit(Submission(req(), model=MODEL, tenant="a", max_queue_depth=3))
    with pytest.raises(TenantQueueAtLimit) as e:
        await store.submit(Submission(req(), model=MODEL, tenant="a", max_queue_depth=3))
    assert (e.value.tenant, e.value.depth, e.value.limit) == ("a", 3, 3)
    await store.submit(Submission(req(), model=MODEL, tenant="b", max_queue_depth=3))  # b's share of 3 over 2 is 1
    with pytest.raises(TenantQueueAtLimit) as e:
        await store.submit(Submission(req(), model=MODEL, tenant="b", max_queue_depth=3))
    assert (e.value.tenant, e.value.depth, e.value.limit) == ("b", 1, 1)
    await FairQueue(store.redis).dispatch(MODEL, 1)  # on arq's queue now: still counted in the depth
    with pytest.raises(TenantQueueAtLimit):
        await store.submit(Submission(req(), model=MODEL, tenant="b", max_queue_depth=3))


async def test_the_queue_never_holds_more_than_twice_its_depth(store):
    """Late-comers' shares take a full queue past its depth, up to twice it: the memory bound."""
    for _ in range(4):
        await store.submit(Submission(req(), model=MODEL, tenant="t0", max_queue_depth=4))
    admitted = 4
    for t in range(1, 12):
        try:
            await store.submit(Submission(req(), model=MODEL, tenant=f"t{t}", max_queue_depth=4))
            admitted += 1
        except QueueAtLimit as e:
            assert not isinstance(e, TenantQueueAtLimit) and e.limit == 8 and "twice max_queue_depth 4" in str(e)
            break
    assert admitted <= 8


async def test_a_tenants_max_queued_refuses_it_alone(redis_url):
    bounds = QueueBounds(max_queue_depth=100, tenants={"a": TenantPolicy(max_queued=2)})
    store = JobStore.from_url(redis_url, fair=True, bounds=bounds)
    try:
        for _ in range(2):
            await store.submit(Submission(req(), model=MODEL, tenant="a"))
        with pytest.raises(TenantQueueAtLimit) as e:
            await store.submit(Submission(req(), model=MODEL, tenant="a"))
        assert str(e.value) == (
            f"tenant 'a' has 2 queued jobs of model '{MODEL}', its limit is 2 (max_queued in TOOLQ_TENANTS)"
        )
        await store.submit(Submission(req(), model=MODEL, tenant="b"))
        [first] = await FairQueue(store.redis).dispatch(MODEL, 1)  # a job that leaves the waiting set
        assert first.tenant == "a"
        await store.submit(Submission(req(), model=MODEL, tenant="a"))  # frees a place in a's count
    finally:
        await store.close()


async def test_an_idempotent_retry_gets_its_job_back_and_waits_once(store):
    a, created = await store.submit(Submission(req(), model=MODEL, tenant="a", idempotency_key="k"))
    b, again = await store.submit(Submission(req(), model=MODEL, tenant="a", idempotency_key="k"))
    assert (a, created, again) == (b, True, False)
    assert await FairQueue(store.redis).waiting(MODEL) == {"a": 1}


async def test_usage_is_counted_once_per_job(store):
    job_id, _ = await store.submit(Submission(req(), model=MODEL, tenant="a"))
    await FairQueue(store.redis).dispatch(MODEL, 1)
    used = Usage(prompt_tokens=30, completion_tokens=12)
    result = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop", usage=used)
    await store.emit(job_id, EventType.final, {}, result=result, usage=used)
    with pytest.raises(JobEnded):  # a second terminal event is refused, and so is its count
        await store.emit(job_id, EventType.final, {}, result=result, usage=used)
    u = await read_usage(store.redis, "a")
    assert (u.minute_tokens, u.day_tokens, u.tokens, u.prompt_tokens, u.completion_tokens, u.jobs) == (
        42,
        42,
        42,
        30,
        12,
        1,
    )
    assert await FairQueue(store.redis).running(["a"]) == {"a": 0}


async def test_a_rounds_tokens_count_in_the_windows_with_its_checkpoint_and_once(store):
    """A long job's rounds count against the minute and day budgets while it runs, each token
    once: a checkpoint carries the job's figures so far, a repeat of them (an attempt resumed from
    that checkpoint) adds nothing, and the terminal event adds the rest and the job's totals."""
    job_id, _ = await store.submit(Submission(req(), model=MODEL, tenant="a"))
    await FairQueue(store.redis).dispatch(MODEL, 1)
    first = Usage(prompt_tokens=20, completion_tokens=5)
    for _ in range(2):  # the second: the same checkpoint written again by a resumed attempt
        await store.emit(job_id, EventType.tool_result, {}, checkpoint={"usage": first.model_dump()}, usage=first)
        u = await read_usage(store.redis, "a")
        assert (u.minute_tokens, u.day_tokens, u.tokens, u.jobs) == (25, 25, 0, 0)
    await store.emit(job_id, EventType.tool_call, {}, usage=Usage(prompt_tokens=99))  # no checkpoint: not counted
    assert (await read_usage(store.redis, "a")).minute_tokens == 25
    used = Usage(prompt_tokens=30, completion_tokens=12)
    result = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop", usage=used)
    await store.emit(job_id, EventType.final, {}, result=result, usage=used)
    u = await read_usage(store.redis, "a")
    assert (u.minute_tokens, u.day_tokens, u.tokens, u.prompt_tokens, u.completion_tokens, u.jobs) == (
        42,
        42,
        42,
        30,
        12,
        1,
    )


async def test_a_threads_runs_take_their_tenants_fair_turn(store):
    """A thread's run, the first and the one after it, waits in its tenant's set like a submitted
    job: a flood from another tenant does not hold it back, and its policy is recorded."""
    threads = ThreadStore(store)
    fair = FairQueue(store.redis)
    await submit_many(store, "a", 20)
    tid = (await threads.create("b")).id
    first = await threads.run("b", tid, req("one"), model=MODEL, policy=TenantPolicy(weight=2, job_tokens=500))
    second = await threads.run("b", tid, req("two"), model=MODEL, strategy="enqueue")
    assert (first.state, second.state) == ("started", "waiting")
    assert await store.redis.zcard(keys.queue(MODEL)) == 0  # nothing on arq's queue before its turn
    assert await fair.waiting(MODEL) == {"a": 20, "b": 1}
    assert float(await store.redis.hget(keys.TENANT_WEIGHTS, "b")) == 2
    assert await store.redis.hget(keys.job(first.job_id), "job_tokens") == b"500"
    await fair.dispatch(MODEL, 1)  # a's turn (a entered first)
    [d] = await fair.dispatch(MODEL, 1)
    assert (d.job_id, d.tenant) == (first.job_id, "b")
    result = JobResult(job_id=first.job_id, status=JobStatus.succeeded, finish_reason="stop")
    await store.emit(first.job_id, EventType.final, {"content": "ok"}, result=result)
    assert await fair.waiting(MODEL) == {"a": 19, "b": 1}  # the next run waits for b's turn, not in arq's queue
    assert await store.redis.zscore(keys.queue(MODEL), f"{second.job_id}:1") is None
    picked = [x.job_id for x in await fair.dispatch(MODEL, 2)]
    assert second.job_id in picked


async def test_fifo_when_fair_share_is_off(redis_url):
    store = JobStore.from_url(redis_url)
    try:
        job_id, _ = await store.submit(Submission(req(), model=MODEL, tenant="a"))
        assert await store.redis.zscore(keys.queue(MODEL), f"{job_id}:1") is not None
        assert await FairQueue(store.redis).waiting(MODEL) == {}
    finally:
        await store.close()


async def test_a_nudge_wakes_its_worker_and_its_list_keeps_the_backlog(store):
    # Each nudge pushes one token onto the worker's own wake list, which lives a minute and keeps
    # at most the wake backlog, as every wake list does (store/lua/lib/wake_push.lua).
    fair = FairQueue(store.redis)
    own = keys.worker_wake("m", "w1")
    await fair.nudge("m", "w1")
    assert await store.redis.lrange(own, 0, -1) == [b"slot"]
    assert 0 < await store.redis.pttl(own) <= 60_000
    for _ in range(keys.WAKE_BACKLOG + 5):
        await fair.nudge("m", "w1")
    assert await store.redis.llen(own) == keys.WAKE_BACKLOG
