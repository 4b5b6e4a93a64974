"""One door for every submission (store/admission.py, gateway/submission.py: admit): a job
posted through each door (POST /v1/jobs, chat completions, responses, a conversation's response,
a thread run, the SDK's Redis mode) gets the same refusals, from a real gateway app over real
Redis. The queue bounds are enforced in the store's scripts, so a door that skipped its own
checks would still be refused there; the tests show each door's answer, not the code path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import redis.asyncio as aredis

from gateway.settings import GatewaySettings
from store import keys
from store.usage import MINUTE_MS
from tests.integration.gateway_support import asgi_client, register_fake_worker
from toolq import errors
from toolq.client.redis_transport import DIRECT_TENANT, RedisTransport
from toolq.settings import AdmissionSettings
from toolq.tenants import TenantPolicy
from toolq.webhooks.settings import WebhookSettings
from toolq.wire.protocol import JobRequest

MODEL = "alpha"
TENANT = "acme"
KEYS = {"a-key": TENANT, "b-key": "globex"}
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # a webhook signing secret's shape
USER = [{"role": "user", "content": "hello"}]

Post = Callable[[httpx.AsyncClient, str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


async def _post(c: httpx.AsyncClient, path: str, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any]]:
    r = await c.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
    return r.status_code, r.json()


async def via_jobs(c: httpx.AsyncClient, key: str, extra: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return await _post(c, "/v1/jobs", {"messages": USER, **extra}, key)


async def via_chat(c: httpx.AsyncClient, key: str, extra: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return await _post(c, "/v1/chat/completions", {"model": MODEL, "messages": USER, **extra}, key)


async def via_responses(c: httpx.AsyncClient, key: str, extra: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return await _post(c, "/v1/responses", {"model": MODEL, "input": "hello", "background": True, **extra}, key)


async def via_conversation(c: httpx.AsyncClient, key: str, extra: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, conv = await _post(c, "/v1/conversations", {}, key)
    assert status == 200, conv
    body = {"model": MODEL, "input": "hello", "conversation": conv["id"], "background": True, **extra}
    return await _post(c, "/v1/responses", body, key)


async def via_thread_run(c: httpx.AsyncClient, key: str, extra: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, thread = await _post(c, "/v1/threads", {}, key)
    assert status == 201, thread
    return await _post(c, f"/v1/threads/{thread['id']}/runs", {"messages": USER, **extra}, key)


# the OpenAI doors take no toolq fields (webhook), only OpenAI's; max_tokens is spelled their way
DOORS: dict[str, Any] = {
    "jobs": (via_jobs, "max_tokens"),
    "chat": (via_chat, "max_tokens"),
    "responses": (via_responses, "max_output_tokens"),
    "conversation": (via_conversation, "max_output_tokens"),
    "thread_run": (via_thread_run, "max_tokens"),
}
TOOLQ_DOORS = ("jobs", "thread_run")


def message(body: dict[str, Any]) -> str:
    return str(body["error"]["message"])


def settings(redis_url: str, **kw: Any) -> GatewaySettings:
    return GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys=KEYS, **kw)


@pytest.mark.parametrize("door", list(DOORS))
async def test_each_door_refuses_a_tenant_past_its_queued_cap(redis_url, door):
    register_fake_worker(redis_url, MODEL, [])  # nothing runs: jobs stay queued
    s = settings(redis_url, tenants={TENANT: TenantPolicy(max_queued=2)})
    post, _ = DOORS[door]
    async with asgi_client(s) as c:
        for _ in range(2):
            assert (await via_jobs(c, "a-key", {}))[0] == 202
        status, body = await post(c, "a-key", {})
        assert status == 429, body
        assert f"tenant '{TENANT}' has 2 queued jobs of model '{MODEL}', its limit is 2" in message(body)
        assert (await via_jobs(c, "b-key", {}))[0] == 202  # another tenant is still admitted


@pytest.mark.parametrize("door", list(DOORS))
async def test_each_door_refuses_a_tenant_past_its_share_of_a_full_queue(redis_url, door):
    register_fake_worker(redis_url, MODEL, [])
    post, _ = DOORS[door]
    async with asgi_client(settings(redis_url, max_queue_depth=4)) as c:
        for _ in range(4):
            status, body = await via_jobs(c, "b-key", {})
            assert status == 202, body  # globex fills the queue
        # acme holds none: its share of a full queue (4 over 2 tenants) admits it twice
        for _ in range(2):
            assert (await via_jobs(c, "a-key", {}))[0] == 202
        status, body = await post(c, "a-key", {})
        assert status == 429, body
        assert f"tenant '{TENANT}' has 2 queued jobs of model '{MODEL}', its limit is 2" in message(body)
        assert "max_queue_depth 4 over 2 tenants" in message(body)


@pytest.mark.parametrize("door", list(DOORS))
async def test_each_door_applies_the_caps_and_the_token_budget(redis_url, door):
    register_fake_worker(redis_url, MODEL, [])
    s = settings(redis_url, max_tokens_cap=1000, tenants={TENANT: TenantPolicy(tokens_per_minute=10)})
    post, max_tokens = DOORS[door]
    async with asgi_client(s) as c:
        status, body = await post(c, "a-key", {max_tokens: 1001})
        assert status in (400, 422) and "above the limit of 1000" in message(body), body  # OpenAI's: 400
        r = aredis.Redis.from_url(redis_url)
        secs, _ = await r.time()
        await r.set(keys.usage_window(TENANT, "minute", int(secs) * 1000 // MINUTE_MS), 10, ex=120)
        await r.aclose()
        status, body = await post(c, "a-key", {})
        assert status == 429 and "its budget tokens_per_minute is 10" in message(body), body


@pytest.mark.parametrize("door", TOOLQ_DOORS)
async def test_each_toolq_door_checks_the_webhook_and_applies_the_default(redis_url, door):
    register_fake_worker(redis_url, MODEL, [])
    hooks = WebhookSettings(
        secrets={TENANT: [SECRET]}, defaults={TENANT: {"url": "https://hooks.example.com/x", "events": ["completed"]}}
    )
    post, _ = DOORS[door]
    async with asgi_client(settings(redis_url), hooks) as c:
        status, body = await post(c, "a-key", {"webhook": "http://127.0.0.1:9/hook"})
        assert status == 422 and body["error"]["code"] == "webhook_refused", body
        status, body = await post(c, "a-key", {})
        assert status == 202, body
        r = aredis.Redis.from_url(redis_url)
        target = await r.hget(keys.job(body["job_id"]), "webhook")
        await r.aclose()
        assert target is not None and b"hooks.example.com" in target  # the tenant's default


async def test_thread_runs_waiting_on_their_thread_count_as_queued(redis_url):
    """The issue's probe: twenty runs posted to one thread were all accepted past the depth."""
    register_fake_worker(redis_url, MODEL, [])
    async with asgi_client(settings(redis_url, max_queue_depth=3)) as c:
        _, thread = await _post(c, "/v1/threads", {}, "a-key")
        answers = [await _post(c, f"/v1/threads/{thread['id']}/runs", {"messages": USER}, "a-key") for _ in range(5)]
        assert [s for s, _ in answers] == [202, 202, 202, 429, 429]
        assert "its limit is 3" in message(answers[3][1])
        # the first run's end starts the next; the waiting one leaves the count as it starts
        assert (await via_jobs(c, "b-key", {}))[0] == 202


async def test_the_sdk_redis_mode_passes_the_same_bounds_budget_and_webhook_check(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    admission = AdmissionSettings(max_queue_depth=100, tenants={DIRECT_TENANT: TenantPolicy(max_queued=2)})
    hooks = WebhookSettings(secrets={DIRECT_TENANT: [SECRET]})
    sdk = RedisTransport(redis_url, admission, hooks)
    try:
        with pytest.raises(errors.InvalidRequest) as refused:
            await sdk.submit(JobRequest(messages=USER, webhook="http://10.0.0.1/hook"), None)
        assert refused.value.code == "webhook_refused"
        for _ in range(2):
            await sdk.submit(JobRequest(messages=USER), None)
        with pytest.raises(errors.QueueFull) as full:
            await sdk.submit(JobRequest(messages=USER), None)
        assert f"tenant '{DIRECT_TENANT}' has 2 queued jobs of model '{MODEL}', its limit is 2" in str(full.value)
        r = sdk.store.redis
        secs, _ = await r.time()
        budget = RedisTransport(
            redis_url, AdmissionSettings(tenants={DIRECT_TENANT: TenantPolicy(tokens_per_minute=5)}), hooks
        )
        await r.set(keys.usage_window(DIRECT_TENANT, "minute", int(secs) * 1000 // MINUTE_MS), 5, ex=120)
        with pytest.raises(errors.BudgetExhausted):
            await budget.submit(JobRequest(messages=USER), None)
        await budget.aclose()
    finally:
        await sdk.aclose()
