"""A tool schema whose grammar could not be bounded is refused at the gateway, naming the field, at
every door that takes tool definitions (toolq/wire/schema_bounds.py), before anything is queued: a 422
on /v1/jobs, and on the OpenAI doors their 400 ``invalid_request_error`` (gateway/openai/errors.py)."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import asgi_client, queued_jobs, register_fake_worker

ASK = [{"role": "user", "content": "hi"}]
HOSTILE = {"type": "object", "properties": {"x": {"type": "string", "minLength": 300_000_000}}}
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": HOSTILE}}


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/jobs", {"messages": ASK, "tools": [TOOL], "model": "m"}, 422),
        ("/v1/chat/completions", {"model": "m", "messages": ASK, "tools": [TOOL]}, 400),
        ("/v1/responses", {"model": "m", "input": "hi", "tools": [{**TOOL["function"], "type": "function"}]}, 400),
    ],
)
async def test_an_unbounded_schema_is_refused_naming_the_field(redis_url, path, body, status):
    register_fake_worker(redis_url, "m", [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        r = await c.post(path, json=body)
    assert r.status_code == status, r.text
    text = r.text
    assert "parameters.properties.x.minLength is 300000000, above the limit of 1000" in text, text
    assert "TOOLQ_SCHEMA_MAX_REPEAT" in text
    assert queued_jobs(redis_url, "m") == 0


async def test_a_pattern_re2_cannot_run_is_a_422(redis_url):
    register_fake_worker(redis_url, "m", [])
    tool = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a)\\1$"}}},
        },
    }
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        r = await c.post("/v1/jobs", json={"messages": ASK, "tools": [tool], "model": "m"})
    assert r.status_code == 422, r.text
    assert "tools[0].function" in r.text and "parameters.properties.x.pattern is not a pattern RE2 can run" in r.text
