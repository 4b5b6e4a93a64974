"""Tool services over real Redis, in real processes: `toolq tools serve` instances that execute a
job's calls through the gateway, claim the calls of a killed instance, share the load, stop
gracefully; and the result script's rules (once per call id, only from the instance handed the
call)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
import redis
import redis.asyncio as aredis

from gateway.settings import GatewaySettings
from store import keys
from store.scripts import Script
from tests.integration.gateway_support import asgi_client, wait_for
from tests.integration.test_gateway import sse_events
from tests.support.services import REPO, ServiceProcess
from tests.support.workers import WorkerProcess, write_rules
from toolq.services import ServiceCaller, ServiceFleetView, read_services
from toolq.services.calls import RESULT_TTL_MS

CALL_GLORP = '<tool_call>{"name": "convert_glorp", "arguments": {"glorp": 6, "blap": 7}}</tool_call>'
CALL_SLOW = '<tool_call>{"name": "slow_glorp", "arguments": {"glorp": 3, "seconds": 2.5}}</tool_call>'
GLORP_JOB = {"messages": [{"role": "user", "content": "Convert 6 glorps at blap rate 7"}], "max_iterations": 3}


def rules(call: str) -> str:
    return write_rules([("<tool_response>\n", "Converted."), ("", call)])


@pytest.fixture
def settings(redis_url) -> GatewaySettings:
    return GatewaySettings(redis_url=redis_url, fleet_cache_s=0)


@pytest.fixture
async def r(redis_url):
    client = aredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def services(redis_url):
    started: list[ServiceProcess] = []

    def start(**kw) -> ServiceProcess:
        started.append(ServiceProcess(redis_url, **kw).wait_ready())
        return started[-1]

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGCONT)  # a test may have stopped it
        s.stop()


async def run_job(c, body: dict) -> tuple[dict, list[dict]]:
    r = await c.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    events = sse_events((await c.get(f"/v1/jobs/{job_id}/events")).text)  # follows to the terminal event
    return (await c.get(f"/v1/jobs/{job_id}")).json(), events


# ---------------------------------------------------------------------- through a job


async def test_a_service_in_another_process_runs_a_job_call_through_the_gateway(settings, redis_url, services):
    services()
    worker = WorkerProcess(redis_url, script=rules(CALL_GLORP)).wait_ready()
    try:
        async with asgi_client(settings) as c:
            listed = {t["function"]["name"]: t for t in (await c.get("/v1/tools")).json()["tools"]}
            assert listed["convert_glorp"]["where"] == "service"
            assert listed["convert_glorp"]["models"] == ["scripted"]
            assert listed["calculate_zorbix"]["where"] == "worker"

            view, events = await run_job(c, {**GLORP_JOB, "tools": ["convert_glorp"]})
    finally:
        worker.stop()
    assert [e["type"] for e in events] == ["queued", "started", "tool_call", "tool_result", "final"]
    assert events[2]["data"]["where"] == "service" and events[2]["data"]["arguments"] == {"glorp": 6, "blap": 7}
    assert events[3]["data"]["where"] == "service" and events[3]["data"]["content"] == "42"
    assert view["status"] == "succeeded" and view["result"]["content"] == "Converted."


async def test_the_gateway_refuses_a_tool_no_live_service_serves(settings, redis_url):
    worker = WorkerProcess(redis_url, script=rules(CALL_GLORP)).wait_ready()
    try:
        async with asgi_client(settings) as c:
            r = await c.post("/v1/jobs", json={**GLORP_JOB, "tools": ["convert_glorp"]})
    finally:
        worker.stop()
    assert r.status_code == 422, r.text
    assert "unknown tool(s) 'convert_glorp'" in r.json()["error"]["message"]


async def test_a_killed_instance_s_call_is_claimed_by_another_and_the_job_ends_final(settings, redis_url, services, r):
    first = services(lease_ms=1000)
    worker = WorkerProcess(redis_url, script=rules(CALL_SLOW)).wait_ready()
    try:
        async with asgi_client(settings) as c:
            created = await c.post("/v1/jobs", json={**GLORP_JOB, "tools": ["slow_glorp"]})
            job_id = created.json()["job_id"]

            async def handed_to_first() -> bool:
                pending = await r.xpending_range(keys.tool_calls("slow_glorp"), keys.SERVICE_GROUP, "-", "+", 10)
                return any(p["consumer"].decode() == first.instance_id for p in pending)

            await wait_for(handed_to_first, timeout=15)
            first.kill()  # mid-call: the call stays pending under the dead consumer
            second = services(lease_ms=1000)
            events = sse_events((await c.get(f"/v1/jobs/{job_id}/events")).text)
            view = (await c.get(f"/v1/jobs/{job_id}")).json()
    finally:
        worker.stop()
    assert events[-1]["type"] == "final" and view["status"] == "succeeded"
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["content"] == f"slow glorp 3 done by {second.proc.pid}"
    assert "claimed a call of a lost instance" in second.output()


async def test_a_service_that_does_not_answer_gives_the_job_a_tool_failure_not_a_hang(settings, redis_url, services):
    svc = services(lease_ms=10_000)  # its entry outlives the stop by seconds: callers still send to it
    worker = WorkerProcess(redis_url, script=rules(CALL_GLORP), env={"TOOLQ_TOOL_TIMEOUT_S": "1.5"}).wait_ready()
    try:
        os.kill(svc.proc.pid, signal.SIGSTOP)  # registered, alive for its entry's TTL, answering nothing
        async with asgi_client(settings) as c:
            view, events = await asyncio.wait_for(run_job(c, {**GLORP_JOB, "tools": ["convert_glorp"]}), 30)
    finally:
        worker.stop()
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["ok"] is False
    assert result["content"] == "tool service 'convert_glorp' did not answer within 1.5 s"
    assert events[-1]["type"] == "final" and view["status"] == "succeeded"


# ---------------------------------------------------------------------- the caller and the instances


async def test_no_live_instance_is_a_failed_outcome_at_once(r):
    out = await ServiceCaller(r).call("convert_glorp", "call_x", {"glorp": 1, "blap": 1}, 5)
    assert not out.ok and out.content == "no live tool service serves 'convert_glorp'; the call was not sent"
    assert await r.xlen(keys.tool_calls("convert_glorp")) == 0


async def test_two_instances_share_the_load(services, r):
    services(concurrency=4)
    services(concurrency=4)
    caller = ServiceCaller(r)
    outs = await asyncio.gather(*(caller.call("whoami", f"call_{i}", {"n": i}, 10) for i in range(40)))
    assert all(o.ok for o in outs), [o.content for o in outs if not o.ok]
    by_pid = Counter(o.content.split(":")[0] for o in outs)
    assert len(by_pid) == 2 and min(by_pid.values()) >= 5, by_pid
    assert sorted(int(o.content.split(":")[1]) for o in outs) == list(range(40))


async def test_a_call_id_sent_again_gets_the_accepted_result_without_running_twice(services, r):
    services()
    caller = ServiceCaller(r)
    first = await caller.call("whoami", "call_same", {"n": 1}, 5)
    again = await caller.call("whoami", "call_same", {"n": 2}, 5)
    assert first.ok and again.content == first.content
    assert await r.xlen(keys.tool_calls("whoami")) == 0  # answered entries are deleted


async def test_sigterm_finishes_the_call_in_hand_then_deregisters(services, r, redis_url):
    svc = services()
    caller = ServiceCaller(r, ServiceFleetView(r, max_age_s=0))
    call = asyncio.create_task(caller.call("slow_glorp", "call_term", {"glorp": 1, "seconds": 1.0}, 10))

    async def handed() -> bool:
        return (await r.xpending(keys.tool_calls("slow_glorp"), keys.SERVICE_GROUP))["pending"] > 0

    await wait_for(handed, timeout=10)
    svc.proc.terminate()
    out = await call
    assert out.ok and out.content == f"slow glorp 1 done by {svc.proc.pid}"
    assert await asyncio.to_thread(svc.proc.wait, 10) == 0
    assert not (await read_services(r)).instances
    consumers = await r.xinfo_consumers(keys.tool_calls("slow_glorp"), keys.SERVICE_GROUP)
    assert svc.instance_id not in {c["name"].decode() for c in consumers}


def test_serve_refuses_bad_input_in_one_line(redis_url):
    def serve(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "toolq", "tools", "serve", *args]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)

    for args, said in [
        (("no_such_module_xyz",), "cannot load tool module 'no_such_module_xyz'"),
        (("json", "--redis-url", redis_url), "no @tool functions in json"),
        (("tests.support.service_tools", "--concurrency", "0"), "--concurrency must be at least 1"),
        (("tests.support.service_tools", "--redis-url", "http://x"), "bad Redis URL"),
        ((), "name at least one MODULE with @tool functions, or an MCP server with --mcp"),
        (("--mcp", "{not json"), "--mcp '{not json' is not JSON"),
        (("--mcp", '{"name": "x"}'), 'give exactly one of "command"'),
    ]:
        done = serve(*args)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


# ---------------------------------------------------------------------- the result script's rules


async def hand_one_call(r, consumer: str, call_id: str) -> str:
    """Send a call to convert_glorp and read it as ``consumer``; the entry id it was handed."""
    stream = keys.tool_calls("convert_glorp")
    await r.xgroup_create(stream, keys.SERVICE_GROUP, id="0", mkstream=True)
    sent = await Script(r, "service_call")(
        calls=stream,
        result=keys.tool_result("convert_glorp", call_id),
        call_id=call_id,
        arguments="{}",
        timeout_ms=5000,
        traceparent=None,  # sent by a caller that does not trace
        tracestate=None,
    )
    assert sent is None
    got = await r.xreadgroup(keys.SERVICE_GROUP, consumer, {stream: ">"}, count=1)
    return got[0][1][0][0].decode()


async def post(r, consumer: str, entry_id: str, call_id: str, content: str) -> str:
    status = await Script(r, "service_result")(
        calls=keys.tool_calls("convert_glorp"),
        result=keys.tool_result("convert_glorp", call_id),
        reply=keys.tool_reply("convert_glorp", call_id),
        group=keys.SERVICE_GROUP,
        consumer=consumer,
        entry_id=entry_id,
        call_id=call_id,
        payload=json.dumps({"ok": True, "content": content}),
        ttl_ms=RESULT_TTL_MS,
    )
    return status.decode()


async def test_a_result_posted_twice_is_accepted_once(r):
    entry = await hand_one_call(r, "inst-a", "call_twice")
    assert await post(r, "inst-a", entry, "call_twice", "first") == "accepted"
    assert await post(r, "inst-a", entry, "call_twice", "second") == "duplicate"
    assert await r.lrange(keys.tool_reply("convert_glorp", "call_twice"), 0, -1) == [
        json.dumps({"ok": True, "content": "first"}).encode()
    ]
    assert json.loads(await r.get(keys.tool_result("convert_glorp", "call_twice")))["content"] == "first"


async def test_a_claimed_call_is_answered_once_whichever_instance_posts_first(r):
    entry = await hand_one_call(r, "inst-a", "call_claimed")
    await r.xclaim(keys.tool_calls("convert_glorp"), keys.SERVICE_GROUP, "inst-b", 0, [entry])  # as XAUTOCLAIM does
    assert await post(r, "inst-a", entry, "call_claimed", "late a") == "not_handed"  # no longer a's
    assert await post(r, "inst-b", entry, "call_claimed", "b") == "accepted"
    assert await post(r, "inst-a", entry, "call_claimed", "late a") == "duplicate"
    assert await r.llen(keys.tool_reply("convert_glorp", "call_claimed")) == 1


async def test_a_forged_result_for_a_call_not_handed_is_refused(r):
    entry = await hand_one_call(r, "inst-a", "call_real")
    # another consumer, for the entry it was not handed
    assert await post(r, "inst-x", entry, "call_real", "forged") == "not_handed"
    # the handed consumer, but for another call id than the entry carries
    assert await post(r, "inst-a", entry, "call_other", "forged") == "not_handed"
    # an entry id nobody was handed
    assert await post(r, "inst-a", "1-1", "call_real", "forged") == "not_handed"
    for call_id in ("call_real", "call_other"):
        assert not await r.exists(keys.tool_result("convert_glorp", call_id), keys.tool_reply("convert_glorp", call_id))
    assert await post(r, "inst-a", entry, "call_real", "real") == "accepted"


def test_the_fleet_entry_of_an_instance_expires_and_is_pruned(redis_url):
    r = redis.Redis.from_url(redis_url)
    r.sadd(keys.SERVICES, "gone")  # its hash expired: a dead instance

    async def read() -> int:
        client = aredis.Redis.from_url(redis_url)
        try:
            return len((await read_services(client)).instances)
        finally:
            await client.aclose()

    assert asyncio.run(read()) == 0 and not r.sismember(keys.SERVICES, "gone")
