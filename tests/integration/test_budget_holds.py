"""Token budgets charged atomically (store/budget_holds.py, store/lua/lib/budget.lua) on a real
Redis: parallel submissions, through the store and through the gateway, never reserve more than a
tenant's budget; a job's reservation turns into use as its tokens are counted and is given back
at its end; a thread run reserves as a submit does."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.settings import GatewaySettings
from store import keys
from store.admission import QueueBounds
from store.fair import FairQueue
from store.jobstore import JobStore
from store.submission import Submission
from store.usage import DAY_MS, read_usage
from tests.integration.gateway_support import asgi_client, register_fake_worker
from tests.support.pauses import paused_job, pending
from toolq.errors import BudgetExhausted
from toolq.tenants import TenantPolicy
from toolq.wire.protocol import EventType, JobRequest, JobResult, JobStatus, Message, Usage

MODEL = "alpha"
USER = [{"role": "user", "content": "hello"}]


def req(max_tokens: int = 100, max_iterations: int = 1) -> JobRequest:
    return JobRequest(
        messages=[Message(role="user", content="hi")], max_tokens=max_tokens, max_iterations=max_iterations
    )


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url, fair=True)
    yield s
    await s.close()


async def held_today(store: JobStore, tenant: str) -> int:
    secs, _ = await store.redis.time()
    return int(await store.redis.get(keys.budget_held(tenant, "day", int(secs) * 1000 // DAY_MS)) or 0)


async def test_parallel_submits_never_reserve_past_the_day_budget(store):
    policy = TenantPolicy(tokens_per_day=1000)

    async def one() -> str | BudgetExhausted:
        try:
            return (await store.submit(Submission(req(), model=MODEL, tenant="a", policy=policy)))[0]
        except BudgetExhausted as e:
            return e

    outcomes = await asyncio.gather(*(one() for _ in range(40)))
    admitted = [o for o in outcomes if isinstance(o, str)]
    refused = [o for o in outcomes if isinstance(o, BudgetExhausted)]
    assert len(admitted) == 10 and len(refused) == 30  # each reserves max_tokens x max_iterations = 100
    assert await held_today(store, "a") == 1000
    assert all(e.budget == "tokens_per_day" and e.retry_after_s >= 1 for e in refused)
    assert "its jobs in flight hold 1000 more, its budget tokens_per_day is 1000" in str(refused[0])
    # another tenant's budget is its own
    await store.submit(Submission(req(), model=MODEL, tenant="b", policy=policy))


async def test_the_ceiling_is_job_tokens_when_set_and_at_most_what_is_left(store):
    policy = TenantPolicy(tokens_per_day=500, job_tokens=300)
    await store.submit(Submission(req(max_tokens=512, max_iterations=5), model=MODEL, tenant="a", policy=policy))
    assert await held_today(store, "a") == 300  # job_tokens, not 512 x 5
    await store.submit(Submission(req(), model=MODEL, tenant="a", policy=policy))
    assert await held_today(store, "a") == 500  # the 200 left, not 300
    with pytest.raises(BudgetExhausted):
        await store.submit(Submission(req(), model=MODEL, tenant="a", policy=policy))


async def test_a_reservation_turns_into_use_and_its_rest_is_given_back_at_the_end(store):
    policy = TenantPolicy(tokens_per_day=1000, tokens_per_minute=1000)
    job_id, _ = await store.submit(Submission(req(max_tokens=200), model=MODEL, tenant="a", policy=policy))
    await FairQueue(store.redis).dispatch(MODEL, 1)
    u = await read_usage(store.redis, "a")
    assert (u.day_held, u.minute_held) == (200, 200)
    first = Usage(prompt_tokens=20, completion_tokens=10)
    await store.emit(job_id, EventType.tool_result, {}, checkpoint={"usage": first.model_dump()}, usage=first)
    u = await read_usage(store.redis, "a")
    assert (u.day_tokens, u.day_held, u.minute_held) == (30, 170, 170)  # never counted twice
    used = Usage(prompt_tokens=40, completion_tokens=15)
    result = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop", usage=used)
    await store.emit(job_id, EventType.final, {}, result=result, usage=used)
    u = await read_usage(store.redis, "a")
    assert (u.day_tokens, u.day_held, u.minute_held) == (55, 0, 0)
    assert await store.redis.hmget(keys.job(job_id), "budget_day", "budget_minute") == [None, None]


async def test_a_job_cancelled_while_queued_gives_its_reservation_back(store):
    policy = TenantPolicy(tokens_per_day=100)
    job_id, _ = await store.submit(Submission(req(), model=MODEL, tenant="a", policy=policy))
    with pytest.raises(BudgetExhausted):
        await store.submit(Submission(req(), model=MODEL, tenant="a", policy=policy))
    await store.cancel(job_id)
    assert await held_today(store, "a") == 0
    await store.submit(Submission(req(), model=MODEL, tenant="a", policy=policy))


def settings(redis_url: str, policy: TenantPolicy) -> GatewaySettings:
    return GatewaySettings(
        redis_url=redis_url, fleet_cache_s=0, api_keys={"a-key": "acme", "b-key": "globex"}, tenants={"acme": policy}
    )


async def post(c: httpx.AsyncClient, path: str, body: dict, key: str = "a-key") -> httpx.Response:
    return await c.post(path, json=body, headers={"Authorization": f"Bearer {key}"})


async def test_parallel_posts_through_the_gateway_never_reserve_past_the_budget(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    async with asgi_client(settings(redis_url, TenantPolicy(tokens_per_day=500))) as c:
        body = {"messages": USER, "max_tokens": 100, "max_iterations": 1}
        answers = await asyncio.gather(*(post(c, "/v1/jobs", body) for _ in range(30)))
        codes = [a.status_code for a in answers]
        assert codes.count(202) == 5 and codes.count(429) == 25, codes
        for a in answers:
            if a.status_code == 429:
                err = a.json()["error"]
                assert err["code"] == "budget_exhausted" and "tokens_per_day is 500" in err["message"], err
                assert int(a.headers["Retry-After"]) >= 1
        store: JobStore = c.app.state.toolq.store  # type: ignore[attr-defined]
        assert await held_today(store, "acme") == 500
        assert (await post(c, "/v1/jobs", body, "b-key")).status_code == 202  # globex has no budget


async def test_a_thread_run_reserves_as_a_submit_does(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    async with asgi_client(settings(redis_url, TenantPolicy(tokens_per_day=100))) as c:
        thread = (await post(c, "/v1/threads", {})).json()
        body = {"messages": USER, "max_tokens": 100, "max_iterations": 1}
        first = await post(c, f"/v1/threads/{thread['id']}/runs", body)
        assert first.status_code == 202, first.text
        second = await post(c, f"/v1/threads/{thread['id']}/runs", body)
        assert second.status_code == 429 and second.json()["error"]["code"] == "budget_exhausted", second.text
        third = await post(c, "/v1/jobs", body)
        assert third.status_code == 429 and "hold 100 more" in third.json()["error"]["message"], third.text


async def test_a_resumed_job_is_charged_only_in_a_window_it_holds_nothing_in(redis_url):
    """A paused job keeps its reservation: answered in the same day it resumes even with the day
    spent. Charged yesterday (its hold names yesterday's counter), it meets today's budget: refused
    while today is spent, changing nothing, and charged today once there is room."""
    policy = TenantPolicy(tokens_per_day=5000)
    store = JobStore.from_url(redis_url, fair=True, bounds=QueueBounds(tenants={"a": policy}))
    try:
        secs, _ = await store.redis.time()
        today = int(secs) * 1000 // DAY_MS
        spent = keys.usage_window("a", "day", today)
        held_now = keys.budget_held("a", "day", today)

        same_day = await paused_job(store, pending("c1", "client"), tenant="a")  # reserves 512 x 5
        assert await held_today(store, "a") == 2560
        await store.redis.set(spent, 5000, ex=3600)
        assert await store.answer_actions(same_day, [("c1", {"content": "x"})], "client") is True

        await store.redis.delete(spent)
        old = await paused_job(store, pending("c1", "client"), tenant="a")
        yesterday = keys.budget_held("a", "day", today - 1)
        await store.redis.set(yesterday, 2440, ex=3600)
        await store.redis.decrby(held_now, 2440)
        await store.redis.hset(keys.job(old), "budget_day", f"{yesterday} 2440")
        await store.redis.set(spent, 5000 - 2560, ex=3600)  # with the first job's 2560: today is full
        with pytest.raises(BudgetExhausted) as refused:
            await store.answer_actions(old, [("c1", {"content": "x"})], "client")
        assert refused.value.budget == "tokens_per_day"
        rec = await store.record(old)
        assert rec.status == JobStatus.requires_action and rec.actions["c1"]["answer"] is None

        await store.redis.set(spent, 1000, ex=3600)
        assert await store.answer_actions(old, [("c1", {"content": "x"})], "client") is True
        assert await store.redis.get(yesterday) == b"0"  # yesterday's hold given back
        assert await store.redis.hget(keys.job(old), "budget_day") == f"{held_now} {5000 - 1000 - 2560}".encode()
        assert await held_today(store, "a") == 5000 - 1000
    finally:
        await store.close()
