"""Answering a paused job meets a new job's admission (store/lua/answer.lua calls admit.lua), on a
real gateway app over real Redis: a tenant that parks paused jobs and answers them all at once
cannot take the queue past its bound, the answers past it get the submit's 429 and change nothing,
and other tenants are still admitted."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import redis.asyncio as aredis

from gateway.settings import GatewaySettings
from store import arq_link, keys
from store.fair import FairQueue
from store.jobstore import JobStore
from tests.integration.gateway_support import asgi_client, queued_jobs, register_fake_worker
from tests.support.pauses import pending
from toolq.wire.protocol import EventType, JobStatus, now_ms

MODEL = "alpha"
KEYS = {"a-key": "acme", "b-key": "globex"}
USER = [{"role": "user", "content": "hello"}]
DEPTH = 4


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def park(c: httpx.AsyncClient, store: JobStore, key: str) -> str:
    """A job of ``key``'s tenant submitted, given its fair turn, picked up and paused by a worker
    (as worker/pickup.py and the loop leave it): it holds no place in the queue."""
    r = await c.post("/v1/jobs", json={"messages": USER}, headers=auth(key))
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    chosen = await FairQueue(store.redis).dispatch(MODEL, 1)
    assert [d.job_id for d in chosen] == [job_id]
    await store.redis.zrem(keys.queue(MODEL), arq_link.arq_job_id(job_id, 1))  # the worker's pickup
    await store.emit(job_id, EventType.started, {}, attempt=1, status=JobStatus.running, lease_ms=10_000)
    await store.pause(
        job_id,
        attempt=1,
        pending=[pending("c1", "client")],
        deadline_ms=now_ms() + 60_000,
        checkpoint={"messages": USER, "iterations": 1},
    )
    return job_id


async def answer(c: httpx.AsyncClient, job_id: str) -> httpx.Response:
    body: list[dict[str, Any]] = [{"tool_call_id": "c1", "content": "42"}]
    return await c.post(f"/v1/jobs/{job_id}/tool_results", json=body, headers=auth("a-key"))


async def test_a_flood_of_answers_meets_the_queue_bounds(redis_url):
    register_fake_worker(redis_url, MODEL, [])  # nothing runs: resumed jobs stay queued
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys=KEYS, max_queue_depth=DEPTH)
    async with asgi_client(settings) as c:
        store: JobStore = c.app.state.toolq.store  # type: ignore[attr-defined]
        parked = [await park(c, store, "a-key") for _ in range(3 * DEPTH)]  # past twice the depth
        assert queued_jobs(redis_url, MODEL) == 0

        answers = await asyncio.gather(*(answer(c, j) for j in parked))
        codes = [a.status_code for a in answers]
        # alone, acme may fill the depth and no more (its share of a full queue is all of it)
        assert codes.count(200) == DEPTH and codes.count(429) == 2 * DEPTH, codes
        assert queued_jobs(redis_url, MODEL) == DEPTH
        refused = [(j, a) for j, a in zip(parked, answers, strict=True) if a.status_code == 429]
        for _, a in refused:
            err = a.json()["error"]
            assert err["code"] == "queue_full" and a.headers["Retry-After"] == str(settings.retry_after_s)
            assert f"tenant 'acme' has {DEPTH} queued jobs of model '{MODEL}', its limit is {DEPTH}" in err["message"]
        # a refused answer changed nothing: still paused, its call still unanswered, same attempt
        r = aredis.Redis.from_url(redis_url)
        try:
            job_id = refused[0][0]
            view = (await c.get(f"/v1/jobs/{job_id}", headers=auth("a-key"))).json()
            assert view["status"] == "requires_action" and view["attempt"] == 1
            assert [call["id"] for call in view["required_action"]["calls"]] == ["c1"]
            assert await r.zscore(keys.PAUSED, job_id) is not None
        finally:
            await r.aclose()

        # another tenant is still admitted: its share of the full queue
        assert (await c.post("/v1/jobs", json={"messages": USER}, headers=auth("b-key"))).status_code == 202
        assert queued_jobs(redis_url, MODEL) <= 2 * DEPTH

        # once the queue drains, the same post is taken
        for d in await FairQueue(store.redis).dispatch(MODEL, 2 * DEPTH):
            await store.redis.zrem(keys.queue(MODEL), arq_link.arq_job_id(d.job_id, d.attempt))
        again = await answer(c, refused[0][0])
        assert again.status_code == 200 and again.json()["status"] == "queued", again.text
