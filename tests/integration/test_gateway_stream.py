"""Streaming over a real socket: SSE resume with Last-Event-ID after a dropped connection, the SDK
riding out a gateway restart, cancel while running, a worker killed while a client follows its
job, and the `toolq submit` / `toolq events` commands."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
import pytest
import redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import (
    CALL_ZORBIX,
    LiveGateway,
    free_port,
    private_redis,
    register_fake_worker,
    wait_for,
)
from tests.support.workers import REPO, WorkerProcess, write_rules
from toolq import Client
from toolq.wire.protocol import EventType, JobStatus

SLOW_TEXT = "slowly " * 60  # 420 characters: 105 scripted tokens
RULES = [("<tool_response>\n", "The answer is 22."), ("of 15 and 7", CALL_ZORBIX), ("SLOW", SLOW_TEXT), ("ECHO", "ok")]
TOKEN_DELAY_S = 0.02  # a SLOW job takes about 2 s; the others a few tens of ms


@pytest.fixture(scope="module")
def redis_url():
    with private_redis() as url:
        yield url


@pytest.fixture(scope="module")
def worker(redis_url):
    w = WorkerProcess(redis_url, script=write_rules(RULES, TOKEN_DELAY_S)).wait_ready()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def gateway(redis_url, worker):
    g = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0, keepalive_s=0.2)).start()
    yield g
    g.stop()


async def read_sse(response: httpx.Response, limit: int = 10_000) -> list[dict]:
    """Events from an open SSE response, up to ``limit`` of them or the end of the stream."""
    out, data = [], None
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data = json.loads(line[6:])
        elif line == "" and data is not None:
            out.append(data)
            data = None
            if len(out) >= limit:
                break
    return out


async def test_resume_with_last_event_id_after_a_dropped_connection(gateway):
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        r = await http.post("/v1/jobs", json={"messages": [{"role": "user", "content": "SLOW"}], "stream_tokens": True})
        job_id = r.json()["job_id"]
        url = f"/v1/jobs/{job_id}/events"
        async with http.stream("GET", url) as resp:
            first = await read_sse(resp, limit=4)  # then drop the connection mid-job
        assert [e["type"] for e in first[:2]] == ["queued", "started"] and len(first) == 4
        keepalives = 0
        async with http.stream("GET", url, headers={"Last-Event-ID": str(first[-1]["seq"])}) as resp:
            rest = []
            data = None
            async for line in resp.aiter_lines():
                keepalives += line == ": keep-alive"
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                elif line == "" and data is not None:
                    rest.append(data)
                    data = None
        seen = first + rest
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))  # no gap, no repeat
        assert seen[-1]["type"] == "final" and sum(e["type"] == "final" for e in seen) == 1
        assert "".join(e["data"]["text"] for e in seen if e["type"] == "token") == SLOW_TEXT
        async with http.stream("GET", url) as resp:  # a full replay matches what was followed live
            assert await read_sse(resp) == seen


async def test_client_resumes_across_a_gateway_restart(redis_url, worker):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0)
    first = LiveGateway(settings).start()
    port = first.port
    seen = []
    async with Client(first.url, reconnect_attempts=50) as client:
        job_id = await client.submit("SLOW", stream_tokens=True)
        second = None
        try:
            async for event in client.events(job_id):
                seen.append(event)
                if event.type is EventType.started and second is None:
                    first.stop()  # drops the client's connection mid-job
                    second = LiveGateway(settings, port=port).start()
        finally:
            if second:
                second.stop()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].type is EventType.final
    assert "".join(e.data["text"] for e in seen if e.type is EventType.token) == SLOW_TEXT


async def test_cancel_a_running_job(gateway):
    async with Client(gateway.url) as client:
        job_id = await client.submit("SLOW", stream_tokens=True)
        types = []
        t0 = None
        async for event in client.events(job_id):
            types.append(event.type)
            if event.type is EventType.token and t0 is None:
                t0 = time.monotonic()
                assert await client.cancel(job_id) in (JobStatus.running, JobStatus.cancelled)
        assert types[-1] is EventType.cancelled and time.monotonic() - t0 < 1.5
        result = await client.result(job_id, timeout=5)
        assert result.status is JobStatus.cancelled and result.finish_reason == "cancelled"
        assert await client.cancel(job_id) is JobStatus.cancelled


async def test_a_killed_worker_s_job_resumes_on_another_while_the_client_follows(redis_url):
    script = write_rules([("", "resumed " * 12)], token_delay_s=0.05)  # 24 tokens: 1.2 s per attempt
    a = WorkerProcess(redis_url, script=script, name="mortal").wait_ready()
    b = None
    g = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        async with Client(g.url) as client:
            job_id = await client.submit("go", model="mortal")
            seen = []
            async for event in client.events(job_id):
                seen.append(event)
                if event.type is EventType.started and event.data["attempt"] == 1:
                    # SIGKILL mid-generation first: a loaded machine can take longer to start a
                    # worker than the attempt takes to finish. The job waits for its lease to run out.
                    a.kill()
                    b = WorkerProcess(redis_url, script=script, name="mortal").wait_ready()
            result = await client.result(job_id, timeout=10)
    finally:
        g.stop()
        a.stop()
        if b:
            b.stop()
    starts = [e for e in seen if e.type is EventType.started]
    assert [s.data["attempt"] for s in starts] == [1, 2]
    assert starts[1].data["worker"] == b.worker_id and starts[1].data["worker"] != starts[0].data["worker"]
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].type is EventType.final and result.content == ("resumed " * 12).strip() and result.attempt == 2


def toolq_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolq", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"},
    )


def test_cli_submit_and_events(gateway):
    done = toolq_cli(
        "submit", "Calculate the zorbix of 15 and 7", "--tool", "calculate_zorbix", "--follow", "--url", gateway.url
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "calculate_zorbix" in out and '"zorb"' not in out and "zorb=15" in out and "← 22" in out
    assert "The answer is 22." in out
    job_id = out.split("job ", 1)[1].split()[0]
    replay = toolq_cli("events", job_id, "--url", gateway.url)
    assert replay.returncode == 0 and "The answer is 22." in replay.stdout

    quiet = toolq_cli("submit", "ECHO", "--url", gateway.url)  # without --follow: just the job id
    assert quiet.returncode == 0 and quiet.stdout.strip().startswith("job_")

    failed = toolq_cli("submit", "nothing matches this", "--follow", "--url", gateway.url)
    assert failed.returncode == 1 and "error" in failed.stdout

    refused = toolq_cli("submit", "ECHO", "--tool", "no_such_tool", "--url", gateway.url)
    assert refused.returncode == 3 and "unknown_tool" in refused.stdout and "no_such_tool" in refused.stdout

    missing = toolq_cli("events", "job_00000000000000000000", "--url", gateway.url)
    assert missing.returncode == 3 and "job_not_found" in missing.stdout


async def test_cli_exit_code_of_a_cancelled_job(gateway):
    async with Client(gateway.url) as client:
        job_id = await client.submit("SLOW")

        async def running() -> bool:
            return (await client.job(job_id)).status is JobStatus.running

        await wait_for(running, timeout=5)
        await client.cancel(job_id)
        await client.result(job_id, timeout=5)
    done = await asyncio.to_thread(toolq_cli, "events", job_id, "--url", gateway.url)
    assert done.returncode == 2 and "cancelled" in done.stdout


async def test_a_client_that_leaves_gives_back_its_follower_at_once(redis_url):
    # keep-alives far apart: without the disconnect watch, the follower would stay until the next one
    g = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0, keepalive_s=30)).start()
    fake = register_fake_worker(redis_url, "idle", ["say"])  # its jobs stay queued: the stream stays quiet
    r = redis.Redis.from_url(redis_url)
    state = g.server.config.app.state.toolq

    def followers(job_id: str) -> tuple[int, int, int]:
        # (the hub's followers, the tenant's seats, subscribers of the job's channel)
        subscribed = r.pubsub_numsub(keys.events_channel(job_id))[0][1]
        return state.hub.following, state.seats.taken["default"], subscribed

    try:
        async with httpx.AsyncClient(base_url=g.url, timeout=10) as http:
            job_id = (
                await http.post("/v1/jobs", json={"messages": [{"role": "user", "content": "x"}], "model": "idle"})
            ).json()["job_id"]

            async def follow() -> None:
                async with http.stream("GET", f"/v1/jobs/{job_id}/events") as resp:
                    async for _ in resp.aiter_lines():
                        pass

            task = asyncio.create_task(follow())
            await wait_for(lambda: followers(job_id) == (1, 1, 1), timeout=5)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await wait_for(lambda: followers(job_id) == (0, 0, 0), timeout=1)
    finally:
        g.stop()
        r.delete(keys.worker(fake))  # the other tests of this module expect one model


@pytest.mark.parametrize("keys_env,bind", [("", "127.0.0.1"), ("k1:tenantA", "0.0.0.0")])
def test_toolq_gateway_command_warns_when_open_and_binds_to_localhost(redis_url, keys_env, bind):
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "TOOLQ_API_KEYS": keys_env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolq", "gateway", "--port", str(port), "--redis", redis_url],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, "the gateway did not start"
                time.sleep(0.05)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=15)[0]
    assert f"http://{bind}:{port}" in out
    assert ("NO API KEYS CONFIGURED" in out) == (not keys_env)
