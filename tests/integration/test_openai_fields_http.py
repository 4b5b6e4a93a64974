"""The field table (gateway/openai/fields.py) over HTTP: a value toolq cannot honour is a 400 in
OpenAI's shape whose ``param`` names the field, on both endpoints, before anything is queued."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import asgi_client

ASK = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": ASK, "n": 3}, "n"),
        ("/v1/chat/completions", {"model": "m", "messages": ASK, "logit_bias": {"1": 5}}, "logit_bias"),
        ("/v1/chat/completions", {"model": "m", "messages": ASK, "reasoning_effort": "high"}, "reasoning_effort"),
        ("/v1/responses", {"model": "m", "input": "hi", "include": ["message.output_text.logprobs"]}, "include"),
        ("/v1/responses", {"model": "m", "input": "hi", "truncation": "auto"}, "truncation"),
        ("/v1/responses", {"model": "m", "input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt"),
    ],
)
async def test_a_value_toolq_cannot_honour_is_a_400_naming_the_field(redis_url, path, body, param):
    async with asgi_client(GatewaySettings(redis_url=redis_url)) as c:
        r = await c.post(path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"{param}: ") and "is not supported" in error["message"]
