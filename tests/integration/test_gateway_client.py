"""The SDK against a real worker: HTTP mode (through the gateway app), Redis mode, and the sync facade."""

from __future__ import annotations

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import ZORBIX_RULES, LiveGateway, asgi_client, register_fake_worker
from tests.support.workers import WorkerProcess, write_rules
from toolq import Client, SyncClient, errors
from toolq.wire.protocol import EventType, JobStatus

PROMPT = "Calculate the zorbix of 15 and 7"


@pytest.fixture
def worker(redis_url):
    w = WorkerProcess(redis_url, script=write_rules(ZORBIX_RULES)).wait_ready()
    yield w
    w.stop()


def assert_zorbix_job(events, result):
    assert [e.type for e in events] == [
        EventType.queued,
        EventType.started,
        EventType.tool_call,
        EventType.tool_result,
        EventType.final,
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert result.status is JobStatus.succeeded and result.content == "The answer is 22."
    assert any(m.role == "tool" and m.content == "22" for m in result.messages)


async def test_http_mode_through_the_gateway(redis_url, worker):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"k": "t"})
    async with asgi_client(settings) as http:
        async with Client("http://gateway", api_key="k", http_client=http) as client:
            assert [m.id for m in await client.models()] == ["scripted"]
            assert "calculate_zorbix" in {t.function["name"] for t in await client.tools()}
            job_id = await client.submit(PROMPT, tools=["calculate_zorbix"], idempotency_key="once")
            assert await client.submit(PROMPT, idempotency_key="once") == job_id
            result = await client.result(job_id, timeout=20)
            events = [e async for e in client.events(job_id)]
            assert_zorbix_job(events, result)
            assert [e.seq async for e in client.events(job_id, after=3)] == [4, 5]
            assert [e async for e in client.events(job_id, after=5)] == []  # ended: nothing more
            assert (await client.job(job_id)).status is JobStatus.succeeded
            with pytest.raises(errors.UnknownTool) as bad:
                await client.submit(PROMPT, tools=["nope"])
            assert bad.value.status == 422 and "nope" in bad.value.message
            with pytest.raises(errors.JobNotFoundError):
                await client.job("job_missing")
            with pytest.raises(errors.JobNotFoundError):
                [e async for e in client.events("job_missing")]
        async with Client("http://gateway", api_key="wrong", http_client=http) as client:
            with pytest.raises(errors.Unauthorized):
                await client.models()


async def test_redis_mode_without_a_gateway(redis_url, worker):
    async with Client(redis_url=redis_url) as client:
        assert client.direct
        assert (await client.models())[0].id == "scripted"
        assert "say" in {t.function["name"] for t in await client.tools()}
        job_id = await client.submit(PROMPT, tools=["calculate_zorbix"])
        events = [e async for e in client.events(job_id)]
        assert_zorbix_job(events, await client.result(job_id, timeout=20))
        assert (await client.job(job_id)).result.content == "The answer is 22."
        assert [e.seq async for e in client.events(job_id, after=4)] == [5]
        assert [e async for e in client.events(job_id, after=5)] == []
        with pytest.raises(errors.UnknownModel):
            await client.submit(PROMPT, model="nope")
        with pytest.raises(errors.JobNotFoundError):
            await client.cancel("job_missing")
        with pytest.raises(errors.JobNotFoundError):
            [e async for e in client.events("job_missing")]


async def test_redis_mode_cancel_and_result_timeout(redis_url):
    register_fake_worker(redis_url, "idle", ["say"])  # registered, never picks anything up
    async with Client(redis_url=redis_url) as client:
        job_id = await client.submit("hello")
        with pytest.raises(TimeoutError):
            await client.result(job_id, timeout=0.3)
        assert await client.cancel(job_id) is JobStatus.cancelled
        assert (await client.result(job_id, timeout=5)).finish_reason == "cancelled"


def test_sync_client_for_scripts(redis_url, worker):
    gateway = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        with SyncClient(gateway.url) as client:
            job_id = client.submit(PROMPT)
            events = list(client.events(job_id))
            assert_zorbix_job(events, client.result(job_id, timeout=20))
            assert client.cancel(job_id) is JobStatus.succeeded  # already ended: says how
            assert client.models()[0].queue_depth >= 0
            first_two = []
            for e in client.events(job_id):  # stopping early closes the stream cleanly
                first_two.append(e)
                if len(first_two) == 2:
                    break
            assert [e.seq for e in first_two] == [1, 2]
    finally:
        gateway.stop()
    with SyncClient("http://127.0.0.1:9") as offline:  # nothing listens there
        with pytest.raises(httpx.ConnectError):
            offline.models()
