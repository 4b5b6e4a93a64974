"""MCP servers as a tool source, against a real MCP server process (tests/support/mcp_server.py,
the SDK's FastMCP): listing with pagination, skipped tools, calls, errors, timeouts, a server that
dies and is restarted, an unreachable server, the streamable-HTTP transport; then a job through a
real worker process whose (scripted) model calls the MCP tool."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from store import keys
from store.jobstore import JobStore
from store.submission import Submission
from tests.support.mcp import HttpServer, stdio_server
from tests.support.services import ServiceProcess
from tests.support.workers import WorkerProcess, write_rules
from toolq.mcp import parse_servers
from toolq.wire.protocol import EventType, JobRequest, Message
from worker.sources.mcp import McpSource
from worker.toolbox import ToolResolver

SERVED = ["add", "slow", "fail", "pid", "die", "env", "trace_meta", "weather"]


async def start(*servers: dict, reserved: tuple[str, ...] = ()) -> McpSource:
    return await McpSource.start(parse_servers(list(servers)), reserved=reserved, backoff_s=0.2)


@pytest.fixture
async def source():
    src = await start(stdio_server("t", "--page", "3", env={"TOOLQ_MCP_TEST": "from-env"}))
    yield src
    await src.close()


async def run(src: McpSource, name: str, args: dict, timeout_s: float = 10.0):
    checked = src.check(name, args)
    assert checked.ok, checked.errors
    return await src.run(checked, call_id="call-1", effect_key="fx_" + "0" * 32, timeout_s=timeout_s)


async def test_listing_follows_pages_and_skips_invalid_tools(source):
    assert source.where == "mcp"
    assert source.names() == SERVED  # 10 listed 3 a page; broken_schema and bad.name skipped
    spec = source.spec("add")["function"]
    assert spec["name"] == "add" and spec["description"] == "Add two integers."
    assert spec["parameters"]["properties"]["a"]["type"] == "integer" and spec["parameters"]["required"] == ["a", "b"]
    assert not source.requires_approval("add")


async def test_the_effect_key_travels_in_params_meta_and_idempotency_follows_the_declaration(source):
    checked = source.check("trace_meta", {})
    out = await source.run(checked, call_id="call-9", effect_key="fx_" + "7" * 32, timeout_s=10)
    assert json.loads(out.content)["toolq/effect_key"] == "fx_" + "7" * 32
    assert not source.idempotent("add")  # no idempotentHint, no "idempotent" in the server's entry
    declared = await start(stdio_server("d", "--page", "3", idempotent=True))
    try:
        assert declared.idempotent("add")
    finally:
        await declared.close()


async def test_calls_arguments_checked_env_and_errors(source):
    assert (await run(source, "add", {"a": 15, "b": 7})).content == "22"
    assert (await run(source, "env", {"key": "TOOLQ_MCP_TEST"})).content == "from-env"
    bad = source.check("add", {"a": "15", "b": 7})
    assert not bad.ok and "'15' is not of type 'integer'" in bad.errors[0]
    failed = await run(source, "fail", {"message": "the disk is on fire"})
    assert not failed.ok and failed.error == "tool 'fail' failed: Error executing tool fail: the disk is on fire"
    assert not source.check("nope", {}).ok


async def test_concurrent_calls_share_one_session(source):
    outcomes = await asyncio.gather(*(run(source, "add", {"a": i, "b": 1}) for i in range(20)))
    assert [o.content for o in outcomes] == [str(i + 1) for i in range(20)]
    assert len({(await run(source, "pid", {})).content for _ in range(3)}) == 1


async def test_timeout_is_a_failed_outcome_and_the_session_lives_on(source):
    t0 = time.perf_counter()
    out = await run(source, "slow", {"seconds": 5}, timeout_s=0.3)
    assert not out.ok and out.error == "tool 'slow' timed out after 0.3 s"
    assert time.perf_counter() - t0 < 1.5
    assert (await run(source, "add", {"a": 1, "b": 2})).content == "3"


async def test_server_dying_mid_call_fails_the_call_then_restarts(source):
    first = (await run(source, "pid", {})).content
    died = await run(source, "die", {})
    assert not died.ok and died.error == "tool 'die' failed: MCP server 't' closed the connection during the call"
    again = await run(source, "pid", {})
    assert again.ok and again.content != first  # a new server process


async def test_server_killed_while_idle_is_restarted_by_the_next_call(source):
    pid = int((await run(source, "pid", {})).content)
    os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(0.3)
    out = await run(source, "pid", {})  # the request never left: sent again to a new process
    assert out.ok and int(out.content) != pid


async def test_a_crash_loop_backs_off():
    src = await start(stdio_server("t"))
    try:
        assert not (await run(src, "die", {})).ok
        # the first failure retries at once; the restart works, and dies again
        assert not (await run(src, "die", {})).ok
        early = await run(src, "add", {"a": 1, "b": 1})
        assert not early.ok and "is unavailable" in early.error and "next try in" in early.error
        await asyncio.sleep(0.25)
        assert (await run(src, "add", {"a": 1, "b": 1})).content == "2"
    finally:
        await src.close()


async def test_unreachable_server_is_logged_and_the_others_served(capsys):
    src = await start(
        {"name": "gone", "command": ["/nonexistent/mcp-server"]},
        {"name": "quits", "command": ["python", "-c", "pass"]},
        stdio_server("t"),
    )
    try:
        assert src.names() == SERVED
        out = capsys.readouterr().out
        assert "mcp_server_unavailable" in out and "server=gone" in out and "server=quits" in out
        assert "MCP server 'gone' could not be started: FileNotFoundError" in out
        await src.refresh()  # tries the dead ones again (still dead) without disturbing the live one
        assert (await run(src, "add", {"a": 2, "b": 2})).content == "4"
    finally:
        await src.close()


async def test_two_servers_with_the_same_tools_are_prefixed_and_reserved_names_too():
    src = await start(stdio_server("a"), stdio_server("b"), reserved=())
    try:
        assert sorted(src.names()) == sorted([f"{s}_{n}" for s in "ab" for n in SERVED])
        assert (await run(src, "b_add", {"a": 1, "b": 2})).content == "3"
        assert (await run(src, "a_pid", {})).content != (await run(src, "b_pid", {})).content
    finally:
        await src.close()
    src = await start(stdio_server("t", requires_approval=["die"]), reserved=("add",))
    try:
        assert "t_add" in src.names() and "add" not in src.names() and "weather" in src.names()
        assert src.requires_approval("die") and not src.requires_approval("weather")
    finally:
        await src.close()


async def test_close_ends_the_server_process():
    src = await start(stdio_server("t"))
    pid = int((await run(src, "pid", {})).content)
    await src.close()
    after = await run(src, "pid", {})
    assert not after.ok and "is closed" in after.error  # and no new process
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            await asyncio.sleep(0.1)


async def test_streamable_http_server_and_its_restart():
    server = HttpServer().start()
    src = await start({"name": "h", "url": server.url})
    try:
        assert src.names() == SERVED
        assert (await run(src, "add", {"a": 40, "b": 2})).content == "42"
        assert not (await run(src, "slow", {"seconds": 5}, timeout_s=0.3)).ok
        server.kill()
        lost = await run(src, "add", {"a": 1, "b": 1})
        assert not lost.ok and "MCP server 'h'" in lost.error
        server.start()
        await asyncio.sleep(0.3)  # past the backoff
        assert (await run(src, "add", {"a": 1, "b": 1})).content == "2"
    finally:
        await src.close()
        server.kill()


async def test_resolver_puts_the_worker_registry_first():
    from toolq.tools import load_tool_modules
    from worker.sources.registry import RegistrySource

    registry = load_tool_modules(["worker.demo_tools"])
    src = await start(stdio_server("t"), reserved=registry.names())
    try:
        resolver = ToolResolver([RegistrySource(registry), src])
        specs = {s["function"]["name"]: s["where"] for s in resolver.local_specs()}
        assert specs["add"] == "mcp" and specs["calculate_zorbix"] == "worker"
        box = await resolver.box(JobRequest(messages=[Message(role="user", content="hi")], tools=["weather"]))
        assert box.where("weather") == "mcp"
    finally:
        await src.close()


# ---------------------------------------------------------------- a job through a worker process

CALL_ADD = '<tool_call>{"name": "add", "arguments": {"a": 15, "b": 7}}</tool_call>'


async def test_a_job_calls_the_mcp_tool_through_a_worker_process(redis_url):
    rules = [("<tool_response>\\n22", "The MCP server says 22."), ("", CALL_ADD)]
    env = {"TOOLQ_MCP_SERVERS": json.dumps([stdio_server("calc")])}
    worker = WorkerProcess(redis_url, script=write_rules(rules), env=env).wait_ready()
    store = JobStore.from_url(redis_url)
    try:
        request = JobRequest(messages=[Message(role="user", content="add 15 and 7")], tools=["add"])
        job_id, _ = await store.submit(Submission(request, model="scripted"))

        async def collect():
            return [e async for e in store.follow(job_id)]

        events = await asyncio.wait_for(collect(), 30)
        result = await store.result(job_id)
        registered = await store.redis.hget(keys.worker(worker.worker_id), "tools")
    finally:
        await store.close()
        worker.stop()
    assert [e.type for e in events][-1] == EventType.final, worker.output()
    call = next(e for e in events if e.type == EventType.tool_call)
    outcome = next(e for e in events if e.type == EventType.tool_result)
    assert call.data["where"] == "mcp" and call.data["arguments"] == {"a": 15, "b": 7}
    assert outcome.data["where"] == "mcp" and outcome.data["ok"] and outcome.data["content"] == "22"
    assert result.content == "The MCP server says 22."
    assert any(m.role == "tool" and m.content == "22" for m in result.messages)
    advertised = {t["function"]["name"]: t["where"] for t in json.loads(registered)}
    assert advertised["add"] == "mcp" and advertised["calculate_zorbix"] == "worker"


async def test_a_tool_service_serves_an_mcp_server_to_a_worker_that_has_none(redis_url):
    """``toolq tools serve --mcp``: the fleet reaches the MCP server through one service process."""
    rules = [("<tool_response>\\n22", "The service's MCP server says 22."), ("", CALL_ADD)]
    service = ServiceProcess(redis_url, (), extra=("--mcp", json.dumps(stdio_server("calc")))).wait_ready()
    worker = WorkerProcess(redis_url, script=write_rules(rules)).wait_ready()
    store = JobStore.from_url(redis_url)
    try:
        request = JobRequest(messages=[Message(role="user", content="add 15 and 7")], tools=["add"])
        job_id, _ = await store.submit(Submission(request, model="scripted"))
        events = await asyncio.wait_for(_collect(store, job_id), 30)
        result = await store.result(job_id)
    finally:
        await store.close()
        worker.stop()
        service.stop()
    assert events[-1].type == EventType.final, worker.output() + service.output()
    outcome = next(e for e in events if e.type == EventType.tool_result)
    assert outcome.data["where"] == "service" and outcome.data["ok"] and outcome.data["content"] == "22"
    assert result.content == "The service's MCP server says 22."


async def _collect(store: JobStore, job_id: str) -> list:
    return [e async for e in store.follow(job_id)]
