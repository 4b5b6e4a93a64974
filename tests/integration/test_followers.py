"""Followers of job events through a live gateway: a hundred SSE streams hold no Redis connection
of their own (CLIENT LIST on a Redis of the test's own), a tenant past its cap of followers gets a
429 that names it while another tenant is still served, and a start point that cannot be served
(past the job's end, or trimmed from its log) is answered at once, naming the range."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import redis

from gateway.settings import GatewaySettings
from store import keys
from store.event_hub import EventHub
from store.jobstore import JobStore
from tests.integration.gateway_support import LiveGateway, private_redis, register_fake_worker, wait_for
from toolq.wire.protocol import EventType, JobResult, JobStatus

MODEL = "idle"  # a fleet entry only: its jobs stay queued until the test writes their events


@pytest.fixture(scope="module")
def redis_url():
    with private_redis() as url:
        register_fake_worker(url, MODEL, ["say"], ttl_s=3600)
        yield url


def _hub(g: LiveGateway) -> EventHub:
    return g.server.config.app.state.toolq.hub


async def _submit(http: httpx.AsyncClient, **headers: str) -> str:
    body = {"messages": [{"role": "user", "content": "x"}], "model": MODEL}
    r = await http.post("/v1/jobs", json=body, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


async def _finish(redis_url: str, job_ids: list[str], tokens: int) -> None:
    """What a worker writes for each job: tokens, then the final event."""
    store = JobStore.from_url(redis_url)
    try:
        for job_id in job_ids:
            for i in range(tokens):
                await store.emit(job_id, EventType.token, {"text": str(i)})
            res = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop")
            await store.emit(job_id, EventType.final, {}, result=res)
    finally:
        await store.close()


async def _seqs(http: httpx.AsyncClient, job_id: str, opened: asyncio.Event | None = None, **headers: str) -> list:
    """The seqs of one SSE stream of the job, read to its end."""
    seqs: list[int] = []
    async with http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as resp:
        assert resp.status_code == 200
        if opened is not None:
            opened.set()
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                seqs.append(json.loads(line[6:])["seq"])
    return seqs


def _clients(r: redis.Redis) -> list[dict]:
    return r.client_list()


async def test_a_hundred_followers_hold_no_redis_connection_of_their_own(redis_url):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, keepalive_s=0.5, max_followers_per_tenant=1000)
    g = LiveGateway(settings).start()
    r = redis.Redis.from_url(redis_url)
    try:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx.AsyncClient(base_url=g.url, timeout=20, limits=limits) as http:
            jobs = [await _submit(http) for _ in range(4)]
            tasks: list[asyncio.Task] = []

            async def open_followers(n: int) -> None:  # a few at a time, as followers come and go
                for k in range(0, n, 5):
                    opened = [asyncio.Event() for _ in range(min(5, n - k))]
                    for i, ev in enumerate(opened):
                        tasks.append(asyncio.create_task(_seqs(http, jobs[(k + i) % len(jobs)], ev)))
                    await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in opened)), 10)

            await open_followers(5)
            await wait_for(lambda: _hub(g).following == 5)
            few = len(_clients(r))
            await open_followers(95)
            await wait_for(lambda: _hub(g).following == 100)
            clients = _clients(r)
            print(f"Redis clients with 5 followers: {few}; with 100: {len(clients)}")
            # bounded by what is in flight, not by the followers: the stream reads at once, and the
            # record lookups of the five opens of a batch, each on a pooled connection for one command
            assert len(clients) <= few + settings.follower_reads + 5
            assert not [c for c in clients if "b" in c["flags"]]  # nobody blocked in a read
            subscribers = [c for c in clients if int(c.get("sub", 0)) > 0]
            # the hub's one connection (the jobs' channels and its idle one) and the metrics observer's
            assert sorted(int(c["sub"]) for c in subscribers) == [1, len(jobs) + 1]

            await _finish(redis_url, jobs, tokens=20)
            results = await asyncio.wait_for(asyncio.gather(*tasks), 20)
            assert all(seqs == list(range(1, 23)) for seqs in results)  # queued, 20 tokens, final
            await wait_for(lambda: _hub(g).following == 0)
    finally:
        g.stop()


@pytest.fixture(scope="module")
def capped(redis_url):
    settings = GatewaySettings(
        redis_url=redis_url, fleet_cache_s=0, keepalive_s=0.5, api_keys="ka:A,kb:B", max_followers_per_tenant=2
    )
    g = LiveGateway(settings).start()
    yield g
    g.stop()


async def test_a_tenant_past_its_followers_cap_gets_a_429_naming_it(capped, redis_url):
    a, b = {"Authorization": "Bearer ka"}, {"Authorization": "Bearer kb"}
    async with httpx.AsyncClient(base_url=capped.url, timeout=10) as http:
        job_a = await _submit(http, **a)
        job_b = await _submit(http, **b)
        opened = [asyncio.Event(), asyncio.Event()]
        followers = [asyncio.create_task(_seqs(http, job_a, ev, **a)) for ev in opened]
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in opened)), 10)

        r = await http.get(f"/v1/jobs/{job_a}/events", headers=a)
        err = r.json()["error"]
        assert r.status_code == 429 and err["code"] == "too_many_followers", r.text
        assert err["field"] == "max_followers_per_tenant" and "TOOLQ_MAX_FOLLOWERS_PER_TENANT=2" in err["message"]
        assert r.headers["Retry-After"]
        # a non-streamed chat completion waits as a follower too: refused before any job is made
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
        r = await http.post("/v1/chat/completions", json=chat, headers=a)
        assert r.status_code == 429 and "max_followers_per_tenant" in r.text

        # the other tenant is still served
        other = asyncio.Event()
        b_follower = asyncio.create_task(_seqs(http, job_b, other, **b))
        await asyncio.wait_for(other.wait(), 10)

        # a follower that leaves gives its seat back at once
        followers[0].cancel()
        await asyncio.gather(followers[0], return_exceptions=True)
        again = asyncio.Event()
        followers.append(asyncio.create_task(_seqs(http, job_a, again, **a)))
        await asyncio.wait_for(again.wait(), 10)

        await _finish(redis_url, [job_a, job_b], tokens=1)
        assert await asyncio.wait_for(followers[1], 10) == [1, 2, 3]
        assert await asyncio.wait_for(followers[2], 10) == [1, 2, 3]
        assert await asyncio.wait_for(b_follower, 10) == [1, 2, 3]


async def test_a_start_past_the_end_or_before_the_log_is_answered_at_once(capped, redis_url):
    a = {"Authorization": "Bearer ka"}
    async with httpx.AsyncClient(base_url=capped.url, timeout=10) as http:
        running = await _submit(http, **a)  # its log: seq 1 (queued)
        began = time.monotonic()
        r = await http.get(f"/v1/jobs/{running}/events", headers={**a, "Last-Event-ID": "5"})
        assert r.status_code == 416 and r.json()["error"]["code"] == "events_past_end"
        assert "past the last event" in r.json()["error"]["message"] and "seq 1" in r.json()["error"]["message"]
        r = await http.get(f"/v1/jobs/{running}/events", params={"after": 2}, headers=a)
        assert r.status_code == 416
        assert time.monotonic() - began < 2  # at once, not after a keep-alive or the record's expiry

        # trimmed: the log keeps seq 6 on, as a capped stream would
        store = JobStore.from_url(redis_url)
        try:
            for i in range(9):
                await store.emit(running, EventType.token, {"text": str(i)})
            await store.redis.xtrim(keys.log(running), minid="6-0", approximate=False)
        finally:
            await store.close()
        r = await http.get(f"/v1/jobs/{running}/events", headers={**a, "Last-Event-ID": "2"})
        err = r.json()["error"]
        assert r.status_code == 410 and err["code"] == "events_gone" and "events 3..5" in err["message"], r.text
        await _finish(redis_url, [running], tokens=0)  # final: seq 11
        r = await http.get(f"/v1/jobs/{running}/events", headers={**a, "Last-Event-ID": "5"})
        seqs = [json.loads(line[6:])["seq"] for line in r.text.splitlines() if line.startswith("data: ")]
        assert r.status_code == 200 and seqs == [6, 7, 8, 9, 10, 11]
        # an ended job: everything delivered is 204, further on is 416
        assert (await http.get(f"/v1/jobs/{running}/events", headers={**a, "Last-Event-ID": "11"})).status_code == 204
        assert (await http.get(f"/v1/jobs/{running}/events", headers={**a, "Last-Event-ID": "12"})).status_code == 416
