"""No request can stall the gateway's loop or leave a job that no worker can read: nesting past
TOOLQ_MAX_JSON_DEPTH is refused at the door naming the field and the depth (gateway/json_door.py,
toolq/wire/nesting.py), schemas are bounded in subschemas per tool and per request
(toolq/wire/schema_bounds.py), and a large request's checks run off the loop (gateway/off_loop.py), so
``/healthz`` answers promptly while a hostile body is being validated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from gateway.check_process import NICE, in_check_process
from gateway.settings import GatewaySettings
from tests.integration.gateway_support import asgi_client, queued_jobs, register_fake_worker
from tests.support.gateways import GatewayProcess
from tests.support.healthz_probe import HealthzProbe
from tests.support.loop_lag import lag_buckets, stalls

ASK = [{"role": "user", "content": "hi"}]


def nested(depth: int) -> dict:
    node: dict = {"leaf": 1}
    for _ in range(depth - 1):
        node = {"m": node}
    return node


def tool(parameters: dict, name: str = "f") -> dict:
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": parameters}}


def any_of(n: int, salt: str = "") -> dict:
    """A schema of ``n`` tiny pattern subschemas: within every other bound."""
    alts = [{"pattern": f"^{salt}{i}$"} for i in range(n)]  # small: a tool's schema is at most 32 KiB
    return {"type": "object", "properties": {"x": {"anyOf": alts}}}


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/jobs", {"messages": ASK, "model": "m", "metadata": nested(210)}, 422, "metadata"),
        ("/v1/chat/completions", {"model": "m", "messages": ASK, "logit_bias": nested(210)}, 400, "logit_bias"),
        ("/v1/responses", {"model": "m", "input": "hi", "metadata": nested(300)}, 400, "metadata"),
        ("/v1/threads", {"messages": ASK, "metadata": nested(150)}, 422, "metadata"),
    ],
)
async def test_a_body_nested_too_deep_is_refused_at_the_door(redis_url, path, body, status, field):
    register_fake_worker(redis_url, "m", [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        r = await c.post(path, json=body)
    assert r.status_code == status, r.text
    assert f"{field} nests" in r.text and "levels deep, above the limit of 100" in r.text, r.text
    assert "TOOLQ_MAX_JSON_DEPTH" in r.text
    assert queued_jobs(redis_url, "m") == 0


async def test_a_body_of_a_million_brackets_is_a_4xx_not_a_500(redis_url):
    register_fake_worker(redis_url, "m", [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        r = await c.post("/v1/jobs", content=b"[" * 900_000, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "too_deep"
    assert "900000 levels deep" in r.text


async def test_tool_call_arguments_nested_too_deep_are_refused(redis_url):
    register_fake_worker(redis_url, "m", [])
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[" * 5000 + "]" * 5000}}
    messages = [
        *ASK,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        r = await c.post("/v1/jobs", json={"messages": messages, "model": "m"})
    assert r.status_code == 422, r.text
    assert "arguments nests 5000 levels deep" in r.text
    assert queued_jobs(redis_url, "m") == 0


async def test_a_pattern_of_deeply_nested_groups_is_refused(redis_url):
    register_fake_worker(redis_url, "m", [])
    pattern = "(" * 300 + "a" + ")" * 300
    params = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        r = await c.post("/v1/jobs", json={"messages": ASK, "model": "m", "tools": [tool(params)]})
    assert r.status_code == 422, r.text
    assert "parameters.properties.x.pattern is 300 groups deep, above the limit of 32" in r.text
    assert "TOOLQ_SCHEMA_MAX_PATTERN_NESTING" in r.text


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([tool(any_of(1200))], "TOOLQ_SCHEMA_MAX_SUBSCHEMAS"),
        (
            [tool(any_of(900, "a"), "f"), tool(any_of(900, "b"), "g"), tool(any_of(900, "c"), "h")],
            "TOOLQ_SCHEMA_MAX_REQUEST_SUBSCHEMAS",
        ),
    ],
)
async def test_schemas_are_bounded_in_subschemas_per_tool_and_per_request(redis_url, tools, says):
    register_fake_worker(redis_url, "m", [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        t0 = time.perf_counter()
        r = await c.post("/v1/jobs", json={"messages": ASK, "model": "m", "tools": tools})
        took = time.perf_counter() - t0
    assert r.status_code == 422, r.text
    assert says in r.text and "JSON objects (subschemas)" in r.text, r.text
    assert took < 1.0, f"a refusal by count costs no metaschema check, but took {took:.2f} s"
    assert queued_jobs(redis_url, "m") == 0


def _hostile_body(i: int) -> bytes:
    """About 1 MiB, within every bound, and as costly to check as the bounds allow: two tools of
    about 1,000 distinct pattern subschemas each (no cache helps), and a long message."""
    tools = [tool(any_of(995, f"r{i}a"), "f"), tool(any_of(995, f"r{i}b"), "g")]
    body = {"messages": [{"role": "user", "content": "x" * 900_000}], "model": "m", "tools": tools}
    return json.dumps(body).encode()


async def test_healthz_answers_promptly_while_hostile_bodies_are_validated(redis_url):
    register_fake_worker(redis_url, "m", [])
    bodies = [_hostile_body(i) for i in range(4)]
    assert all(len(b) > 900_000 for b in bodies)
    gw = GatewayProcess(redis_url, env={"TOOLQ_MAX_BODY_BYTES": str(2 << 20)}).wait_ready()
    try:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            await http.get("/healthz")
            await check_process_warm(http)
            before = await lag_buckets(http)

            async def post(body: bytes) -> httpx.Response:
                return await http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})

            # /healthz asked from a process of its own: this one's loop is busy sending the bodies
            with HealthzProbe(gw.url) as probe:
                t0 = time.perf_counter()
                answers = await asyncio.gather(*(post(b) for b in bodies))
                busy_s = time.perf_counter() - t0
            seen = stalls(before, await lag_buckets(http))
    finally:
        gw.stop()
    assert all(a.status_code == 202 for a in answers), [a.text[:300] for a in answers]
    print(
        f"4 hostile bodies checked in {busy_s:.2f} s; gateway loop: {seen.count} wake-ups, the longest stall "
        f"{seen.longest}; /healthz worst {probe.worst_ms} ms"
    )
    assert busy_s > 0.5, "the bodies were cheap to check: the test measures nothing"
    assert seen.count > 20, "the loop watch did not run"
    assert seen.longest_ms <= 100, f"the gateway's loop stalled {seen.longest} while hostile bodies were checked"
    assert probe.worst_ms < 100, f"/healthz took {probe.worst_ms} ms while hostile bodies were being checked"


async def check_process_warm(http: httpx.AsyncClient, timeout_s: float = 60) -> None:
    """Wait until the gateway's check process has started and imported what it checks with
    (gateway/check_process.py warms it in the background at startup): a spawn that competes with
    the first bodies for the CPU is the start-up's cost, not a body's."""
    props = {f"p{i}": {"type": "string"} for i in range(80)}  # past INLINE_OBJECTS: checked there
    probe = {
        "messages": [{"role": "user", "content": "x"}],
        "model": "m",
        "tools": [tool({"type": "object", "properties": props}, "warm")],
    }
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        r = await http.post("/v1/jobs", json=probe)
        assert r.status_code == 202, r.text
        if time.perf_counter() - t0 < 0.05:
            return
        await asyncio.sleep(0.1)


async def test_heavy_checks_run_in_a_process_of_their_own_at_a_lower_cpu_priority():
    """A thread beside the loop shared its GIL and held it while descheduled
    (gateway/check_process.py); the check process has its own, and yields the CPU."""
    loop_nice = os.nice(0)
    pid, checks_nice = await in_check_process(_pid_and_nice)
    assert pid != os.getpid()
    assert checks_nice == min(19, loop_nice + NICE)
    assert os.nice(0) == loop_nice  # the gateway's own priority is untouched


def _pid_and_nice() -> tuple[int, int]:
    return os.getpid(), os.nice(0)


def _children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def test_the_check_process_goes_with_a_gateway_killed_outright(redis_url):
    """A SIGKILLed gateway cannot stop its pool; its check process must not live on as an orphan
    (each held ~80 MB, one left per killed gateway)."""
    gw = GatewayProcess(redis_url)  # not wait_ready: /readyz wants a worker, and none is needed here
    try:
        deadline = time.monotonic() + 60
        while not (checks := _children(gw.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)  # started with the gateway, in the background
        assert checks, "the gateway started no check process"
    finally:
        gw.kill()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() for p in checks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in checks), "the check process outlived its gateway"
