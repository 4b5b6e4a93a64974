"""The gateway's HTTP API against a real Redis (and, where a job must run, a real scripted worker
process): the whole path, model and tool checks, idempotency, auth, limits, queue-full, errors."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import redis

from gateway.auth import KeyRing
from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import (
    ZORBIX_RULES,
    LiveGateway,
    asgi_client,
    queued_jobs,
    register_fake_worker,
    wait_for,
)
from tests.support.workers import WorkerProcess, write_rules

USER = {"role": "user", "content": "Calculate the zorbix of 15 and 7"}
JOB = {"messages": [USER]}


def sse_events(text: str) -> list[dict]:
    """The events of a complete SSE body, checking that each frame's id and event match its data."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":") and ": " in line
        )
        if "data" in fields:
            ev = json.loads(fields["data"])
            assert fields["id"] == str(ev["seq"]) and fields["event"] == ev["type"]
            out.append(ev)
    return out


@pytest.fixture
def settings(redis_url) -> GatewaySettings:
    return GatewaySettings(redis_url=redis_url, fleet_cache_s=0)


@pytest.fixture
def worker(redis_url):
    w = WorkerProcess(redis_url, script=write_rules(ZORBIX_RULES)).wait_ready()
    yield w
    w.stop()


# ---------------------------------------------------------------------- the whole path


async def test_submit_follow_and_fetch_result_with_a_real_worker(settings, worker):
    async with asgi_client(settings) as c:
        r = await c.post("/v1/jobs", json={**JOB, "tools": ["calculate_zorbix"]})
        assert r.status_code == 202, r.text
        body = r.json()
        job_id = body["job_id"]
        assert body["status"] == "queued" and body["model"] == "scripted" and body["created"] is True
        assert body["links"]["events"] == f"/v1/jobs/{job_id}/events"
        assert r.headers["location"] == f"/v1/jobs/{job_id}"

        r = await c.get(f"/v1/jobs/{job_id}/events")  # replays and follows until the terminal event
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        assert [e["type"] for e in events] == ["queued", "started", "tool_call", "tool_result", "final"]
        assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
        assert events[2]["data"]["name"] == "calculate_zorbix"
        assert events[2]["data"]["arguments"] == {"zorb": 15, "bix": 7}
        assert events[3]["data"]["content"] == "22"

        r = await c.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200
        job = r.json()
        assert job["status"] == "succeeded" and job["finished_ms"] >= job["created_ms"]
        result = job["result"]
        assert result["content"] == "The answer is 22." and result["finish_reason"] == "stop"
        call_ids = {tc["id"] for m in result["messages"] if m["role"] == "assistant" for tc in m["tool_calls"] or []}
        tool_msgs = [m for m in result["messages"] if m["role"] == "tool"]
        assert len(tool_msgs) == 1 and tool_msgs[0]["content"] == "22" and tool_msgs[0]["tool_call_id"] in call_ids

        r = await c.get(f"/v1/jobs/{job_id}/events", params={"after": 3})  # replay from a seq
        assert [e["seq"] for e in sse_events(r.text)] == [4, 5]
        # a client that got everything and reconnects (as EventSource does) is told to stop
        r = await c.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "5"})
        assert r.status_code == 204 and r.content == b""

        finished = 'toolq_jobs_finished_total{model="scripted",outcome="succeeded"} 1.0'

        async def scraped() -> str:  # the observer reads pub/sub alongside; give it a moment
            text = (await c.get("/metrics")).text
            return text if finished in text else ""

        metrics = await wait_for(scraped, timeout=5)
        assert 'toolq_jobs_submitted_total{model="scripted"} 1.0' in metrics
        assert 'toolq_jobs_finished_total{model="scripted",outcome="succeeded"} 1.0' in metrics
        assert 'toolq_tool_calls_total{tool="calculate_zorbix"} 1.0' in metrics
        assert 'toolq_tool_duration_seconds_count{tool="calculate_zorbix"} 1.0' in metrics
        assert 'toolq_queue_wait_seconds_count{model="scripted"} 1.0' in metrics
        assert 'toolq_job_iterations_count{model="scripted"} 1.0' in metrics
        assert 'toolq_queue_depth{model="scripted"}' in metrics
        assert job_id not in metrics
        # per tenant since fair share (issue 20): the tenants of the configured keys, never a job id
        assert 'toolq_tenant_jobs_started{tenant="default"} 1.0' in metrics
        assert 'toolq_tenant_jobs_running{tenant="default"} 0.0' in metrics


async def test_tools_models_and_readiness_reflect_the_live_workers(settings, worker):
    async with asgi_client(settings) as c:
        models = (await c.get("/v1/models")).json()["data"]
        assert [m["id"] for m in models] == ["scripted"] and models[0]["workers"] == 1
        assert "calculate_zorbix" in models[0]["tools"]
        one = (await c.get("/v1/models/scripted")).json()
        assert one["queue_depth"] == 0 and one["id"] == "scripted"
        assert (await c.get("/v1/models/nope")).status_code == 404
        tools = (await c.get("/v1/tools")).json()["tools"]
        zorbix = next(t for t in tools if t["function"]["name"] == "calculate_zorbix")
        assert zorbix["models"] == ["scripted"] and zorbix["function"]["parameters"]["required"] == ["zorb", "bix"]
        ready = await c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["workers"] == 1
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        assert (await c.get("/docs")).status_code == 200
        assert "/v1/jobs" in (await c.get("/openapi.json")).json()["paths"]


async def test_readyz_says_why_it_is_not_ready(settings, own_redis):
    async with asgi_client(settings) as c:
        r = await c.get("/readyz")
        assert r.status_code == 503 and r.json()["reason"] == "no live worker is registered"
    down = GatewaySettings(redis_url=own_redis.url, fleet_cache_s=0)
    async with asgi_client(down) as c:
        own_redis.stop()
        r = await c.get("/readyz")
        assert r.status_code == 503 and r.json()["redis"] is False and "unreachable" in r.json()["reason"]
        r = await c.post("/v1/jobs", json=JOB)  # the store is down: a 503 to retry, not a crash
        assert r.status_code == 503 and r.headers["retry-after"]
        assert (await c.get("/healthz")).status_code == 200


# ---------------------------------------------------------------------- model and tool checks


async def test_model_is_resolved_from_the_fleet(settings, redis_url):
    async with asgi_client(settings) as c:
        r = await c.post("/v1/jobs", json=JOB)
        assert r.status_code == 503 and "no live worker" in r.json()["error"]["message"]
        assert r.headers["retry-after"] == "5"

        register_fake_worker(redis_url, "alpha", ["say", "calculate_zorbix"])
        r = await c.post("/v1/jobs", json=JOB)
        assert r.status_code == 202 and r.json()["model"] == "alpha"

        register_fake_worker(redis_url, "beta", ["say"])
        r = await c.post("/v1/jobs", json=JOB)
        assert r.status_code == 422
        err = r.json()["error"]
        assert err["field"] == "model" and "alpha" in err["message"] and "beta" in err["message"]

        r = await c.post("/v1/jobs", json={**JOB, "model": "gamma"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_model"
        assert "'gamma'" in r.json()["error"]["message"]

        r = await c.post("/v1/jobs", json={**JOB, "model": "beta", "tools": ["say", "calculate_zorbix"]})
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_tool"
        assert "calculate_zorbix" in r.json()["error"]["message"] and r.json()["error"]["field"] == "tools"

        named = {"type": "function", "function": {"name": "calculate_zorbix"}}
        r = await c.post("/v1/jobs", json={**JOB, "model": "beta", "tool_choice": named})
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_tool"
        r = await c.post("/v1/jobs", json={**JOB, "model": "alpha", "tool_choice": named})
        assert r.status_code == 202


async def test_a_tool_only_some_workers_of_a_model_serve_is_not_offered(settings, redis_url):
    register_fake_worker(redis_url, "alpha", ["say", "calculate_zorbix"])
    register_fake_worker(redis_url, "alpha", ["say"])  # mid rolling update
    async with asgi_client(settings) as c:
        r = await c.post("/v1/jobs", json={**JOB, "tools": ["calculate_zorbix"]})
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_tool"
        assert [t["function"]["name"] for t in (await c.get("/v1/tools")).json()["tools"]] == ["say"]


async def test_dead_workers_are_not_counted(settings, redis_url):
    wid = register_fake_worker(redis_url, "alpha", ["say"])
    r = redis.Redis.from_url(redis_url)
    r.delete(keys.worker(wid))  # its hash expired: the worker is dead
    async with asgi_client(settings) as c:
        assert (await c.post("/v1/jobs", json=JOB)).status_code == 503
        assert (await c.get("/v1/models")).json() == {"object": "list", "data": []}
    assert not r.sismember(keys.WORKERS, wid)  # pruned from the fleet set


# ---------------------------------------------------------------------- idempotency


async def test_idempotency_key_gives_the_same_job_per_tenant(redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"ka": "A", "kb": "B"})
    async with asgi_client(s) as c:
        a = {"Authorization": "Bearer ka"}
        first = await c.post("/v1/jobs", json=JOB, headers={**a, "Idempotency-Key": "order-17"})
        again = await c.post("/v1/jobs", json=JOB, headers={**a, "Idempotency-Key": "order-17"})
        assert (first.status_code, again.status_code) == (202, 200)
        assert first.json()["job_id"] == again.json()["job_id"] and again.json()["created"] is False
        # the key in the body works the same way
        body = await c.post("/v1/jobs", json={**JOB, "idempotency_key": "order-17"}, headers=a)
        assert body.status_code == 200 and body.json()["job_id"] == first.json()["job_id"]
        other = await c.post("/v1/jobs", json=JOB, headers={"X-API-Key": "kb", "Idempotency-Key": "order-17"})
        assert other.status_code == 202 and other.json()["job_id"] != first.json()["job_id"]
        fresh = await c.post("/v1/jobs", json=JOB, headers={**a, "Idempotency-Key": "order-18"})
        assert fresh.status_code == 202 and fresh.json()["job_id"] != first.json()["job_id"]
    # exactly one job (one queue entry: arq's, or a fair-share waiting set's) per (tenant, key)
    assert queued_jobs(redis_url, "alpha") == 3


async def test_concurrent_submits_with_one_key_make_one_job(settings, redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    async with asgi_client(settings) as c:
        answers = await asyncio.gather(
            *(c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "burst"}) for _ in range(10))
        )
    assert len({r.json()["job_id"] for r in answers}) == 1
    assert sorted(r.status_code for r in answers) == [200] * 9 + [202]
    assert queued_jobs(redis_url, "alpha") == 1


async def test_a_key_whose_job_expired_makes_a_new_job(settings, redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    async with asgi_client(settings) as c:
        first = (await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "k"})).json()["job_id"]
        redis.Redis.from_url(redis_url).delete(keys.job(first))  # its record expired
        again = await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "k"})
        assert again.status_code == 202 and again.json()["job_id"] != first


async def test_idempotent_retry_succeeds_even_when_the_queue_is_full(redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, max_queue_depth=1)
    async with asgi_client(s) as c:
        first = await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "k"})
        assert first.status_code == 202
        retry = await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "k"})
        assert retry.status_code == 200 and retry.json()["job_id"] == first.json()["job_id"]
        assert (await c.post("/v1/jobs", json=JOB)).status_code == 429


# ---------------------------------------------------------------------- auth


async def test_api_keys_and_tenants(redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"key-a": "A", "key-b": "B"})
    async with asgi_client(s) as c:
        r = await c.post("/v1/jobs", json=JOB)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert (await c.post("/v1/jobs", json=JOB, headers={"Authorization": "Bearer nope"})).status_code == 401
        assert (await c.get("/v1/models")).status_code == 401
        assert (await c.get("/v1/tools", headers={"X-API-Key": "nope"})).status_code == 401

        r = await c.post("/v1/jobs", json=JOB, headers={"Authorization": "Bearer key-a"})
        assert r.status_code == 202
        job_id = r.json()["job_id"]
        a, b = {"Authorization": "Bearer key-a"}, {"X-API-Key": "key-b"}
        assert (await c.get(f"/v1/jobs/{job_id}", headers=a)).status_code == 200
        for method, path in (
            ("GET", f"/v1/jobs/{job_id}"),
            ("GET", f"/v1/jobs/{job_id}/events"),
            ("POST", f"/v1/jobs/{job_id}/cancel"),
        ):
            other = await c.request(method, path, headers=b)
            missing = await c.request(method, path.replace(job_id, "job_00000000000000000000"), headers=b)
            assert other.status_code == missing.status_code == 404, path
            assert other.json()["error"]["code"] == missing.json()["error"]["code"] == "job_not_found"
            assert (await c.request(method, path)).status_code == 401
        assert (await c.get(f"/v1/jobs/{job_id}", headers=a)).json()["status"] == "queued"  # B's cancel did nothing
        # probes and scrapes carry no key
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/metrics")).status_code == 200


def test_keys_are_held_hashed_and_map_to_tenants():
    ring = KeyRing({"s3cret-key": "acme"})
    assert "s3cret-key" not in repr(vars(ring))
    assert ring.tenant_of_key("s3cret-key") == "acme" and ring.tenant_of_key("s3cret") is None
    assert KeyRing({}).open and not ring.open


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("TOOLQ_API_KEYS", "k1:tenantA, k2:tenantB")
    monkeypatch.setenv("TOOLQ_MAX_QUEUE_DEPTH", "7")
    s = GatewaySettings()
    assert s.api_keys == {"k1": "tenantA", "k2": "tenantB"} and s.max_queue_depth == 7
    assert s.bind_host() == "0.0.0.0"
    monkeypatch.setenv("TOOLQ_API_KEYS", '{"k3": "C"}')
    assert GatewaySettings().api_keys == {"k3": "C"}
    monkeypatch.delenv("TOOLQ_API_KEYS")
    open_ = GatewaySettings()
    assert open_.open_access and open_.bind_host() == "127.0.0.1" and open_.port == 8000
    monkeypatch.setenv("TOOLQ_API_KEYS", "no-tenant-here")
    with pytest.raises(ValueError):
        GatewaySettings()


# ---------------------------------------------------------------------- limits


async def test_every_limit_answers_with_the_field_and_the_limit(redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    s = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        max_body_bytes=4096,
        max_messages=3,
        max_tokens_cap=256,
        max_iterations_cap=4,
        timeout_cap_s=60,
    )
    async with asgi_client(s) as c:
        big = {"messages": [{"role": "user", "content": "x" * 5000}]}
        r = await c.post("/v1/jobs", json=big)
        assert r.status_code == 413 and "4096 bytes" in r.json()["error"]["message"]

        async def chunked():  # no Content-Length: the middleware counts the bytes itself
            for _ in range(10):
                yield b" " * 1000

        r = await c.post("/v1/jobs", content=chunked(), headers={"content-type": "application/json"})
        assert r.status_code == 413

        cases = [
            ({"messages": [USER] * 4}, "messages", "messages has 4 entries, above the limit of 3"),
            ({**JOB, "max_tokens": 300}, "max_tokens", "max_tokens 300 is above the limit of 256"),
            ({**JOB, "max_iterations": 5}, "max_iterations", "max_iterations 5 is above the limit of 4"),
            ({**JOB, "timeout_s": 61}, "timeout_s", "timeout_s 61 is above the limit of 60"),
        ]
        for body, field, message in cases:
            r = await c.post("/v1/jobs", json=body)
            assert r.status_code == 422, body
            assert r.json()["error"] == {"code": "limit_exceeded", "message": message, "field": field}

        # left out, max_tokens (default 512) and max_iterations (default 5) fit under the caps
        r = await c.post("/v1/jobs", json=JOB)
        assert r.status_code == 202
        stored = json.loads(redis.Redis.from_url(redis_url).hget(keys.job(r.json()["job_id"]), "request"))
        assert (stored["max_tokens"], stored["max_iterations"]) == (256, 4)


async def test_an_oversized_body_gets_its_413_over_a_real_socket(redis_url):
    """A client that writes its whole body before reading (httpx's async client, requests) reads
    the 413, where an answer sent mid-upload reached it as a reset connection (ReadError)."""
    gw = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0, max_body_bytes=4096)).start()
    try:
        async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
            for size in (1 << 20, 4 << 20):
                r = await c.post("/v1/jobs", json={"messages": [{"role": "user", "content": "x" * size}]})
                assert r.status_code == 413 and "4096 bytes" in r.json()["error"]["message"]

                async def chunks(size: int = size):  # no Content-Length: counted as it arrives
                    for _ in range(size // 65536):
                        yield b" " * 65536

                r = await c.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
                assert r.status_code == 413
            # an OpenAI path answers in OpenAI's shape, as its routes do
            big = {"model": "m", "messages": [{"role": "user", "content": "x" * 8192}]}
            r = await c.post("/v1/chat/completions", json=big)
            assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error", r.text
            assert "4096 bytes" in r.json()["error"]["message"]
    finally:
        gw.stop()


async def test_a_full_queue_answers_429_with_retry_after(redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])  # no real worker: jobs stay queued
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, max_queue_depth=2, retry_after_s=3)
    async with asgi_client(s) as c:
        assert [(await c.post("/v1/jobs", json=JOB)).status_code for _ in range(2)] == [202, 202]
        r = await c.post("/v1/jobs", json=JOB)
        assert r.status_code == 429 and r.headers["retry-after"] == "3"
        # one tenant alone may fill the queue; past it, its share of a full queue is the whole depth
        assert r.json()["error"]["code"] == "queue_full" and "its limit is 2" in r.json()["error"]["message"]
        assert "max_queue_depth 2" in r.json()["error"]["message"]
        assert (await c.get("/v1/models/alpha")).json()["queue_depth"] == 2
        assert 'toolq_queue_depth{model="alpha"} 2.0' in (await c.get("/metrics")).text


# ---------------------------------------------------------------------- malformed input


async def test_malformed_requests_get_4xx_naming_the_problem(settings, redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])
    async with asgi_client(settings) as c:

        def err(r: httpx.Response) -> dict:
            assert 400 <= r.status_code < 500, (r.status_code, r.text)
            return r.json()["error"]

        e = err(await c.post("/v1/jobs", content=b'{"messages": [', headers={"content-type": "application/json"}))
        assert e["code"] == "invalid_json" and "not valid JSON" in e["message"]
        assert "JSON object" in err(await c.post("/v1/jobs", json=[1, 2]))["message"]
        assert (
            "JSON object"
            in err(await c.post("/v1/jobs", content=b"1", headers={"content-type": "application/json"}))["message"]
        )
        untyped = await c.post("/v1/jobs", content=b"hello")  # an open gateway takes typed JSON only
        assert untyped.status_code == 415 and "application/json" in untyped.json()["error"]["message"]
        assert "missing" in err(await c.post("/v1/jobs"))["message"]
        e = err(await c.post("/v1/jobs", json={"messages": [{"role": "user"}]}))
        assert e["field"].startswith("messages[0]") and "needs content" in e["message"]
        e = err(await c.post("/v1/jobs", json={**JOB, "temperature": 9}))
        assert e["field"] == "temperature" and "less than or equal to 2" in e["message"]
        e = err(await c.post("/v1/jobs", json={**JOB, "colour": "red"}))
        assert "colour" in e["message"] and "Extra inputs" in e["message"]
        e = err(await c.post("/v1/jobs", json={**JOB, "tool_choice": "sometimes"}))
        assert e["field"].startswith("tool_choice")
        e = err(await c.post("/v1/jobs", json={**JOB, "version": 9}))
        assert "protocol version 9" in e["message"]
        e = err(await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "k" * 300}))
        assert e["field"] == "Idempotency-Key"
        e = err(await c.get("/v1/jobs/job_x/events", headers={"Last-Event-ID": "seven"}))
        assert e["field"] == "Last-Event-ID"
        assert err(await c.get("/v1/jobs/job_x/events", params={"after": "-1"}))["field"] == "after"
        assert err(await c.get("/v1/jobs/job_x/events", params={"after": str(2**70)}))["field"] == "after"
        assert err(await c.get("/v1/jobs/job_x"))["code"] == "job_not_found"
        assert err(await c.get("/v1/nothing"))["code"] == "not_found"
        assert err(await c.put("/v1/jobs"))["code"] == "method_not_allowed"


# ---------------------------------------------------------------------- cancel


async def test_cancel_a_queued_job(settings, redis_url):
    register_fake_worker(redis_url, "alpha", ["say"])  # nobody picks it up
    async with asgi_client(settings) as c:
        job_id = (await c.post("/v1/jobs", json=JOB)).json()["job_id"]
        r = await c.post(f"/v1/jobs/{job_id}/cancel")
        assert r.status_code == 200 and r.json() == {"job_id": job_id, "status": "cancelled"}
        events = sse_events((await c.get(f"/v1/jobs/{job_id}/events")).text)
        assert [e["type"] for e in events] == ["queued", "cancelled"]
        job = (await c.get(f"/v1/jobs/{job_id}")).json()
        assert job["status"] == "cancelled" and job["result"]["finish_reason"] == "cancelled"
        again = await c.post(f"/v1/jobs/{job_id}/cancel")  # idempotent
        assert again.status_code == 200 and again.json()["status"] == "cancelled"


# ---------------------------------------------------------------------- WAIT for replicas


async def test_a_submission_no_replica_confirms_is_a_503_and_its_retry_finds_the_same_job(redis_url, monkeypatch):
    # store/durability.py: this Redis has no replica, so WAIT 1 always comes back short
    monkeypatch.setenv("TOOLQ_REDIS_WAIT_REPLICAS", "1")
    monkeypatch.setenv("TOOLQ_REDIS_WAIT_TIMEOUT_MS", "50")
    register_fake_worker(redis_url, "alpha", ["say"])
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0)
    async with asgi_client(s) as c:
        first = await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "wk"})
        assert first.status_code == 503 and first.headers["Retry-After"] == "1"
        error = first.json()["error"]
        assert error["code"] == "not_replicated"
        assert "0 of the 1 replica(s)" in error["message"] and "Idempotency-Key" in error["message"]
        job_id = error["message"].split("of job ")[1].split()[0]
        assert (await c.get(f"/v1/jobs/{job_id}")).json()["status"] == "queued"  # kept, never silently lost
        again = await c.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": "wk"})
        assert again.status_code == 503 and job_id in again.json()["error"]["message"]
    assert queued_jobs(redis_url, "alpha") == 1  # the retry made no second job
