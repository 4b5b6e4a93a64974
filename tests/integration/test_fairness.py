"""Fair share through real worker processes (scripted engine) and gateways over a real Redis:
a flood does not delay another tenant, weights give shares, priorities order a tenant's jobs,
a running cap holds across 3 workers and 2 gateways, and each token budget answers 429 or ends
the job with budget_exceeded. The rule itself is pinned in tests/integration/test_fairness_store.py."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import redis as sync_redis

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import asgi_client
from tests.support.workers import WorkerProcess, write_rules
from toolq.protocol import JobRequest, Message
from toolq.store import keys
from toolq.store.jobstore import JobStore
from toolq.tenants import TenantPolicy

MODEL = "scripted"


def job_rules(chars: int, token_delay_s: float) -> str:
    """Every job answers ``chars`` characters (4 a token), ``token_delay_s`` a token."""
    return write_rules([("", "x" * chars)], token_delay_s=token_delay_s)


def req(**kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="go")], tools=[], max_tokens=4096, **kw)


@contextmanager
def workers(redis_url: str, rules: str, n: int, slots: int, env: dict[str, str] | None = None) -> Iterator[list]:
    procs = [
        WorkerProcess(redis_url, script=rules, name=MODEL, extra=("--slots", str(slots)), env=env) for _ in range(n)
    ]
    try:
        for p in procs:
            p.wait_ready()
        yield procs
    finally:
        for p in procs:
            p.stop()


def events(r: sync_redis.Redis, job_id: str) -> list[dict]:
    return [json.loads(f[b"e"]) for _, f in r.xrange(keys.log(job_id))]


def first_ts(evs: list[dict], type: str) -> int | None:
    return next((e["ts"] for e in evs if e["type"] == type), None)


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


async def submit(store: JobStore, tenant: str, n: int, policy: TenantPolicy | None = None, **kw) -> list[str]:
    return [(await store.submit(req(**kw), model=MODEL, tenant=tenant, policy=policy))[0] for _ in range(n)]


def run(coro):
    return asyncio.run(coro)


async def fair_store(redis_url: str) -> JobStore:
    return JobStore.from_url(redis_url, fair=True)


def test_a_flood_of_500_does_not_hold_back_another_tenants_job(redis_url):
    r = sync_redis.Redis.from_url(redis_url)
    # one worker of two slots, as in the measurement; a job takes about 60 ms
    with workers(redis_url, job_rules(80, 0.003), n=1, slots=2):

        async def go() -> tuple[list[str], str]:
            store = await fair_store(redis_url)
            try:
                flood = await submit(store, "a", 500)
                await asyncio.sleep(1.0)  # the flood is running: the queue is saturated
                [b] = await submit(store, "b", 1)
                return flood, b
            finally:
                await store.close()

        flood, b = run(go())
        wait_until(lambda: first_ts(events(r, b), "final") is not None, 30, "b's job to end")
        b_evs = events(r, b)
        b_wait = first_ts(b_evs, "started") - first_ts(b_evs, "queued")
        durations = []
        for job_id in flood:
            evs = events(r, job_id)
            s, f = first_ts(evs, "started"), first_ts(evs, "final")
            if s is not None and f is not None:
                durations.append(f - s)
        mean = statistics.mean(durations)
        ran_a = len(durations)
    print(f"b waited {b_wait} ms behind a's flood; a job takes {mean:.1f} ms on average ({ran_a} of a's ran)")
    assert ran_a < 500  # a's flood was still waiting when b's job started
    assert b_wait <= 2 * mean, (b_wait, mean)


def test_weights_3_to_1_give_start_shares_of_75_25_over_400_jobs(redis_url):
    r = sync_redis.Redis.from_url(redis_url)

    async def go() -> dict[str, list[str]]:
        store = await fair_store(redis_url)
        try:  # both backlogs outlast the first 400 starts
            return {
                "a": await submit(store, "a", 340, TenantPolicy(weight=3)),
                "b": await submit(store, "b", 140, TenantPolicy(weight=1)),
            }
        finally:
            await store.close()

    jobs = run(go())
    started: list[tuple[int, str]] = []
    with workers(redis_url, job_rules(8, 0.002), n=3, slots=2):
        wait_until(lambda: int(r.hget(keys.TENANT_STARTED, "b") or 0) >= 110, 120, "the first 400 starts")
    for tenant, ids in jobs.items():
        for job_id in ids:
            ts = first_ts(events(r, job_id), "started")
            if ts is not None:
                started.append((ts, tenant))
    counts = Counter(t for _, t in sorted(started)[:400])
    print(f"first 400 starts: {dict(counts)}")
    assert abs(counts["a"] / 400 - 0.75) <= 0.05 and abs(counts["b"] / 400 - 0.25) <= 0.05, counts


def test_a_tenants_higher_priority_jobs_start_first(redis_url):
    r = sync_redis.Redis.from_url(redis_url)
    with workers(redis_url, job_rules(200, 0.01), n=1, slots=1):  # a job takes about 0.5 s

        async def go() -> tuple[list[str], list[str]]:
            store = await fair_store(redis_url)
            try:
                await submit(store, "a", 1)  # takes the only slot
                await asyncio.sleep(0.3)
                return await submit(store, "a", 3, priority=1), await submit(store, "a", 3, priority=8)
            finally:
                await store.close()

        low, high = run(go())
        wait_until(lambda: all(first_ts(events(r, j), "final") for j in low), 30, "every job to end")
    order = sorted((first_ts(events(r, j), "started"), j) for j in low + high)
    assert [j for _, j in order] == high + low


def test_a_running_cap_holds_with_3_workers_and_2_gateways(redis_url):
    tenants = json.dumps({"a": {"max_running": 2}})
    r = sync_redis.Redis.from_url(redis_url)
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"ka": "a", "kb": "b"}, tenants=tenants)
    with workers(redis_url, job_rules(40, 0.01), n=3, slots=2, env={"TOOLQ_TENANTS": tenants}):

        async def go() -> dict[str, list[str]]:
            async with asgi_client(settings) as g1, asgi_client(settings) as g2:
                ids: dict[str, list[str]] = {"a": [], "b": []}
                for i in range(10):
                    for tenant, key in (("a", "ka"), ("b", "kb")):
                        gw: httpx.AsyncClient = (g1, g2)[i % 2]
                        resp = await gw.post("/v1/jobs", json=req().model_dump(mode="json"), headers={"X-API-Key": key})
                        assert resp.status_code == 202, resp.text
                        ids[tenant].append(resp.json()["job_id"])
                usage = (await g1.get("/v1/usage", headers={"X-API-Key": "ka"})).json()
                assert usage["max_running"] == 2 and usage["running"] <= 2
                return ids

        ids = run(go())
        every = ids["a"] + ids["b"]
        wait_until(lambda: all(first_ts(events(r, j), "final") for j in every), 60, "every job to end")

    def most_at_once(job_ids: list[str]) -> int:
        edges = []
        for j in job_ids:
            evs = events(r, j)
            edges += [(first_ts(evs, "started"), 1), (first_ts(evs, "final"), -1)]
        now = peak = 0
        for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same ms
            now += step
            peak = max(peak, now)
        return peak

    assert most_at_once(ids["a"]) == 2
    assert most_at_once(ids["b"]) > 2  # b has no cap: the fleet's 6 slots are its to use


def test_each_budget_refuses_or_ends_the_job(redis_url):
    tenants = json.dumps(
        {
            "minute": {"tokens_per_minute": 10},
            "day": {"tokens_per_day": 10},
            "perjob": {"job_tokens": 30},
        }
    )
    settings = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys={"km": "minute", "kd": "day", "kj": "perjob"},
        tenants=tenants,
    )
    body = req().model_dump(mode="json")
    with workers(redis_url, job_rules(400, 0.0), n=1, slots=2):

        async def go() -> None:
            async with asgi_client(settings) as c:
                for key, budget in (("km", "tokens_per_minute"), ("kd", "tokens_per_day")):
                    h = {"X-API-Key": key}
                    first = await c.post("/v1/jobs", json=body, headers=h)
                    assert first.status_code == 202
                    ended = await c.get(f"/v1/jobs/{first.json()['job_id']}/events", headers=h)  # follows it to its end
                    assert ended.status_code == 200 and '"final"' in ended.text
                    refused = await c.post("/v1/jobs", json=body, headers=h)
                    assert refused.status_code == 429, refused.text
                    err = refused.json()["error"]
                    assert err["code"] == "budget_exhausted" and err["field"] == budget
                    assert budget in err["message"] and "used 10" not in err["message"]
                    assert 1 <= int(refused.headers["retry-after"]) <= (60 if budget == "tokens_per_minute" else 86400)
                    usage = (await c.get("/v1/usage", headers=h)).json()
                    assert usage["tokens"] > 10 and usage["jobs"] == 1

                h = {"X-API-Key": "kj"}
                job = (await c.post("/v1/jobs", json=body, headers=h)).json()["job_id"]
                assert (await c.get(f"/v1/jobs/{job}/events", headers=h)).status_code == 200
                view = (await c.get(f"/v1/jobs/{job}", headers=h)).json()
                assert view["status"] == "failed"
                assert view["result"]["error"]["code"] == "budget_exceeded"
                used = view["result"]["usage"]
                assert used["prompt_tokens"] + used["completion_tokens"] > 30
                assert "job_tokens" in view["result"]["error"]["message"]
                metrics = (await c.get("/metrics")).text
                assert 'toolq_tenant_refusals_total{reason="tokens_per_minute",tenant="minute"} 1.0' in metrics
                assert 'toolq_tenant_refusals_total{reason="tokens_per_day",tenant="day"} 1.0' in metrics

        run(go())
