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
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import httpx
import redis as sync_redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import asgi_client, register_fake_worker
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import JobRequest, Message

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


def run(coro):
    return asyncio.run(coro)


KEYS = {"ka": "a", "kb": "b"}


def gateway_settings(redis_url: str, tenants: dict | None = None, keys_: dict[str, str] = KEYS) -> GatewaySettings:
    return GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys=keys_,
        tenants=json.dumps(tenants or {}),
        max_queue_depth=100_000,
    )


@asynccontextmanager
async def two_gateways(settings: GatewaySettings) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with asgi_client(settings) as g1, asgi_client(settings) as g2:
        yield [g1, g2]


async def post_jobs(gws: list[httpx.AsyncClient], key: str, n: int, concurrency: int = 8, **kw) -> list[str]:
    """Submit n jobs with ``key``'s tenant, alternating between the gateways; ids in submit order."""
    sem = asyncio.Semaphore(concurrency)
    body = req(**kw).model_dump(mode="json")

    async def one(i: int) -> str:
        async with sem:
            resp = await gws[i % len(gws)].post("/v1/jobs", json=body, headers={"X-API-Key": key})
        assert resp.status_code == 202, resp.text
        return resp.json()["job_id"]

    out = []
    for i in range(0, n, concurrency):  # in batches, so the ids keep their submit order
        out += await asyncio.gather(*(one(j) for j in range(i, min(n, i + concurrency))))
    return out


def test_a_flood_of_500_does_not_hold_back_another_tenants_job(redis_url):
    r = sync_redis.Redis.from_url(redis_url)
    # 3 workers of two slots behind 2 gateways; a job takes about 250 ms, so the fleet needs
    # about 20 s for the flood and it is still waiting, well saturated, when b submits
    with workers(redis_url, job_rules(200, 0.005), n=3, slots=2):

        async def go() -> tuple[list[str], str]:
            async with two_gateways(gateway_settings(redis_url)) as gws:
                flood = await post_jobs(gws, "ka", 500, concurrency=16)
                await asyncio.sleep(1.0)
                [b] = await post_jobs(gws[1:], "kb", 1)
                return flood, b

        flood, b = run(go())
        wait_until(lambda: first_ts(events(r, b), "final") is not None, 60, "b's job to end")
        b_evs = events(r, b)
        b_queued, b_wait = first_ts(b_evs, "queued"), first_ts(b_evs, "started") - first_ts(b_evs, "queued")
        durations, behind = [], 0
        for job_id in flood:
            evs = events(r, job_id)
            s, f = first_ts(evs, "started"), first_ts(evs, "final")
            if s is None or s > b_queued:
                behind += 1
            if s is not None and f is not None:
                durations.append(f - s)
        mean = statistics.mean(durations)
    print(f"b waited {b_wait} ms behind a's flood ({behind} of a's jobs waiting); a job takes {mean:.1f} ms")
    assert behind > 100  # a's flood was still waiting when b's job was submitted
    assert b_wait <= 2 * mean, (b_wait, mean)


def test_weights_3_to_1_give_start_shares_of_75_25_over_400_jobs(redis_url):
    r = sync_redis.Redis.from_url(redis_url)
    settings = gateway_settings(redis_url, {"a": {"weight": 3}, "b": {"weight": 1}})
    # the backlogs are in before any worker starts; till then the gateways see a registry entry
    register_fake_worker(redis_url, MODEL, [], ttl_s=30)

    async def go() -> dict[str, list[str]]:
        async with two_gateways(settings) as gws:  # both backlogs outlast the first 400 starts
            return {"a": await post_jobs(gws, "ka", 340), "b": await post_jobs(gws, "kb", 140)}

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
    # 3 workers of one slot, a job about 1.5 s: three of a's jobs fill the fleet (started a
    # moment apart, so no two later starts share a millisecond), then a's low and high priority
    # jobs and b's wait; a's high ones start before its low ones, and b keeps its turns between
    # them (priority does not change whose turn it is)
    with workers(redis_url, job_rules(600, 0.01), n=3, slots=1):

        async def go() -> tuple[list[str], list[str], list[str]]:
            async with two_gateways(gateway_settings(redis_url)) as gws:
                fill = []
                for _ in range(3):
                    fill += await post_jobs(gws, "ka", 1)
                    await asyncio.sleep(0.1)
                wait_until(lambda: all(first_ts(events(r, j), "started") for j in fill), 10, "the fleet to fill")
                low = await post_jobs(gws, "ka", 3, concurrency=1, priority=1)
                high = await post_jobs(gws, "ka", 3, concurrency=1, priority=8)
                other = await post_jobs(gws, "kb", 3, concurrency=1)
                assert not any(first_ts(events(r, j), "started") for j in low), "a slot freed too soon"
                return low, high, other

        low, high, other = run(go())
        every = low + high + other
        wait_until(lambda: all(first_ts(events(r, j), "final") for j in every), 60, "every job to end")
    order = [j for _, j in sorted((first_ts(events(r, j), "started"), j) for j in low + high)]
    assert order == high + low
    b_first = min(first_ts(events(r, j), "started") for j in other)
    assert b_first < max(first_ts(events(r, j), "started") for j in high)  # b did not wait behind a's priority 8


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
        operator_keys=["ops"],
        tenants=tenants,
    )
    body = req().model_dump(mode="json")
    say_go = {"role": "user", "content": "go"}
    with workers(redis_url, job_rules(400, 0.0), n=3, slots=2):

        async def go() -> None:
            async with two_gateways(settings) as (c, c2):
                for key, budget in (("km", "tokens_per_minute"), ("kd", "tokens_per_day")):
                    h = {"X-API-Key": key}
                    first = await c.post("/v1/jobs", json=body, headers=h)
                    assert first.status_code == 202
                    ended = await c.get(f"/v1/jobs/{first.json()['job_id']}/events", headers=h)  # follows it to its end
                    assert ended.status_code == 200 and '"final"' in ended.text
                    refused = await c2.post("/v1/jobs", json=body, headers=h)  # the other gateway knows
                    assert refused.status_code == 429, refused.text
                    err = refused.json()["error"]
                    assert err["code"] == "budget_exhausted" and err["field"] == budget
                    assert budget in err["message"] and "used 10" not in err["message"]
                    assert 1 <= int(refused.headers["retry-after"]) <= (60 if budget == "tokens_per_minute" else 86400)
                    usage = (await c.get("/v1/usage", headers=h)).json()
                    assert usage["tokens"] > 10 and usage["jobs"] == 1
                    # a thread's run is a job like any other: the same 429
                    tid = (await c.post("/v1/threads", json={}, headers=h)).json()["id"]
                    refused = await c2.post(f"/v1/threads/{tid}/runs", json={"messages": [say_go]}, headers=h)
                    assert refused.status_code == 429 and refused.json()["error"]["field"] == budget, refused.text

                h = {"X-API-Key": "kj"}
                job = (await c2.post("/v1/jobs", json=body, headers=h)).json()["job_id"]
                assert (await c.get(f"/v1/jobs/{job}/events", headers=h)).status_code == 200
                view = (await c.get(f"/v1/jobs/{job}", headers=h)).json()
                assert view["status"] == "failed"
                assert view["result"]["error"]["code"] == "budget_exceeded"
                used = view["result"]["usage"]
                assert used["prompt_tokens"] + used["completion_tokens"] > 30
                assert "job_tokens" in view["result"]["error"]["message"]
                # and a thread's run carries its tenant's per-job cap
                tid = (await c.post("/v1/threads", json={}, headers=h)).json()["id"]
                placed = await c2.post(f"/v1/threads/{tid}/runs", json={"messages": [say_go]}, headers=h)
                assert placed.status_code == 202, placed.text
                run_id = placed.json()["job_id"]
                assert (await c.get(f"/v1/jobs/{run_id}/events", headers=h)).status_code == 200
                view = (await c.get(f"/v1/jobs/{run_id}", headers=h)).json()
                assert view["result"]["error"]["code"] == "budget_exceeded", view
                # the 429s are each replica's own; per tenant for an operator (gateway/health.py)
                metrics = (await c2.get("/metrics", headers={"X-API-Key": "ops"})).text
                assert 'toolq_tenant_refusals_total{reason="tokens_per_minute",tenant="minute"} 2.0' in metrics
                assert 'toolq_tenant_refusals_total{reason="tokens_per_day",tenant="day"} 2.0' in metrics

        run(go())


def test_metrics_per_tenant_show_waiting_running_started_tokens_and_429s(redis_url):
    """/metrics per tenant: jobs waiting for a fair turn (per model), running, started, tokens,
    and the 429s by reason (queue_full here; the budgets' reasons in the test above)."""
    register_fake_worker(redis_url, MODEL, [])  # the gateway accepts jobs; nothing runs them yet
    settings = GatewaySettings(
        redis_url=redis_url, fleet_cache_s=0, api_keys={"ka": "a", "kb": "b"}, operator_keys=["ops"], max_queue_depth=3
    )
    body = req().model_dump(mode="json")
    r = sync_redis.Redis.from_url(redis_url)
    ops = {"Authorization": "Bearer ops"}  # per-tenant series are for operators (gateway/health.py)

    async def go() -> str:
        async with asgi_client(settings) as c:
            for key in ("ka", "ka", "kb"):
                assert (await c.post("/v1/jobs", json=body, headers={"X-API-Key": key})).status_code == 202
            full = await c.post("/v1/jobs", json=body, headers={"X-API-Key": "kb"})
            assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
            before = (await c.get("/metrics", headers=ops)).text
            assert f'toolq_tenant_jobs_waiting{{model="{MODEL}",tenant="a"}} 2.0' in before
            assert f'toolq_tenant_jobs_waiting{{model="{MODEL}",tenant="b"}} 1.0' in before
            assert 'toolq_tenant_refusals_total{reason="queue_full",tenant="b"} 1.0' in before
            # a worker of two slots takes two of them (one each, by the fair turn) and ends them
            with workers(redis_url, job_rules(40, 0.0), n=1, slots=2):
                wait_until(lambda: int(r.hget(keys.TENANT_STARTED, "b") or 0) == 1, 30, "b's job to start")
                wait_until(lambda: sum(int(v) for v in r.hvals(keys.TENANT_STARTED)) == 3, 30, "every job to start")
                wait_until(lambda: int(r.hget(keys.usage_total("a"), "jobs") or 0) == 2, 30, "a's jobs to end")
            return (await c.get("/metrics", headers=ops)).text

    after = run(go())
    assert 'toolq_tenant_jobs_started{tenant="a"} 2.0' in after
    assert 'toolq_tenant_jobs_started{tenant="b"} 1.0' in after
    assert 'toolq_tenant_jobs_running{tenant="a"} 0.0' in after
    assert f'toolq_tenant_jobs_waiting{{model="{MODEL}",tenant="a"}}' not in after  # nothing waits: dropped
    tokens_a = float(after.split('toolq_tenant_tokens{tenant="a"} ')[1].split()[0])
    assert tokens_a == float(r.hget(keys.usage_total("a"), "tokens")) and tokens_a > 0
