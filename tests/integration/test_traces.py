"""One trace from the caller's traceparent to the tools, across processes: a gateway, a worker
(scripted engine) with an MCP server, and a tool service, each exporting over OTLP/HTTP to a
receiver in the test that decodes the protobuf payloads (tests/support/otlp_receiver.py).

The real model runs the same path in tests/e2e/test_traces_real.py."""

from __future__ import annotations

import json
import secrets

import httpx
import pytest
import redis as redis_lib

from tests.integration.test_gateway import sse_events
from tests.support.gateways import GatewayProcess
from tests.support.mcp import stdio_server
from tests.support.otlp_receiver import OtlpReceiver, Trace
from tests.support.services import ServiceProcess
from tests.support.workers import WorkerProcess, write_rules

CALLS = (
    '<tool_call>\n{"name": "convert_glorp", "arguments": {"glorp": 6, "blap": 7}}\n</tool_call>\n'
    '<tool_call>\n{"name": "trace_meta", "arguments": {}}\n</tool_call>'
)
RULES = [("<tool_response>\n", "Six glorps are 42 blaps."), ("", CALLS)]
SERVER, CONSUMER = 2, 5  # opentelemetry.proto.trace.v1.Span.SpanKind


@pytest.fixture
def traced(redis_url):
    with OtlpReceiver() as receiver:
        env = receiver.env()
        service = ServiceProcess(redis_url, env=env).wait_ready()
        worker_env = {**env, "TOOLQ_MCP_SERVERS": json.dumps([stdio_server("calc")])}
        worker = WorkerProcess(redis_url, script=write_rules(RULES), env=worker_env).wait_ready()
        gateway = GatewayProcess(redis_url, env=env).wait_ready()
        try:
            yield receiver, gateway, worker, service
        finally:
            for p in (gateway, worker, service):
                p.stop()


async def test_one_trace_from_the_callers_traceparent_to_the_tool_service_and_the_mcp_server(traced):
    receiver, gateway, worker, service = traced
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "Convert 6 glorps at a blap rate of 7."}],
        "tools": ["convert_glorp", "trace_meta"],
        "max_tokens": 64,
    }
    headers = {"traceparent": f"00-{trace_id}-{client_span}-01", "tracestate": "caller=t1"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        created = await http.post("/v1/jobs", json=body, headers=headers)
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]
        events = sse_events((await http.get(f"/v1/jobs/{job_id}/events")).text)
    assert events[-1]["type"] == "final", worker.output()
    results = {e["data"]["name"]: e["data"] for e in events if e["type"] == "tool_result"}
    calls = {e["data"]["name"]: e["data"] for e in events if e["type"] == "tool_call"}
    assert results["convert_glorp"]["content"] == "42" and results["convert_glorp"]["where"] == "service"
    assert results["trace_meta"]["where"] == "mcp"

    wanted = ("submit", "queue", "attempt", "chat scripted", "execute_tool convert_glorp", "execute_tool trace_meta")

    def complete(spans) -> bool:
        t = Trace(spans, trace_id)
        return t.has(*wanted) and len(t.named("execute_tool convert_glorp")) == 2 and len(t.named("chat scripted")) == 2

    t = Trace(receiver.wait_for(complete), trace_id)

    # the gateway continues the caller's span (through FastAPI's HTTP server span when the
    # installed FastAPI opens one); the worker continues the gateway's
    submit = t.one("submit", "toolq-gateway")
    above = t.lineage(submit)
    assert (above[-1] if above else submit).parent_id == client_span
    assert all(s.service == "toolq-gateway" for s in above)
    assert (above[-1] if above else submit).kind == SERVER
    assert submit.attributes["toolq.job_id"] == job_id and submit.attributes["gen_ai.request.model"] == "scripted"
    queue, attempt = t.one("queue", "toolq-worker"), t.one("attempt", "toolq-worker")
    assert queue.parent_id == submit.span_id and attempt.parent_id == submit.span_id
    ms = 1_000_000  # the record's times are whole milliseconds
    assert submit.start_ns - ms <= queue.start_ns <= queue.end_ns <= attempt.start_ns + ms
    assert attempt.kind == CONSUMER
    a = attempt.attributes
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["toolq.job_id"], a["toolq.attempt"]) == (
        "invoke_agent",
        "scripted",
        job_id,
        1,
    )
    assert a["toolq.ending"] == "final" and a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0

    # each round under the attempt, its steps under the round
    rounds = sorted(t.named("chat scripted"), key=lambda s: s.start_ns)
    for i, r in enumerate(rounds, 1):
        assert r.parent_id == attempt.span_id
        assert r.attributes["gen_ai.operation.name"] == "chat" and r.attributes["toolq.iteration"] == i
        assert r.attributes["gen_ai.usage.input_tokens"] > 0
        assert sorted(c.name for c in t.children(r)) == ["decode", "prefill"]
        assert r.events == ("render", "parse")

    # the tool service's call: the worker's span, and the service's own under it
    worker_call = t.one("execute_tool convert_glorp", "toolq-worker")
    service_call = t.one("execute_tool convert_glorp", "toolq-tools")
    assert worker_call.parent_id == attempt.span_id
    assert service_call.parent_id == worker_call.span_id and service_call.kind == CONSUMER
    for s in (worker_call, service_call):
        assert s.attributes["gen_ai.operation.name"] == "execute_tool"
        assert s.attributes["gen_ai.tool.name"] == "convert_glorp"
        assert s.attributes["toolq.tool.effect_key"] == calls["convert_glorp"]["effect_key"]
    # the model's call id on the worker's span; the service knows the call by its effect key
    assert worker_call.attributes["gen_ai.tool.call.id"] == calls["convert_glorp"]["id"]
    assert service_call.attributes["gen_ai.tool.call.id"] == calls["convert_glorp"]["effect_key"]
    assert worker_call.attributes["toolq.tool.where"] == "service"
    assert service_call.attributes["toolq.service.instance"] == service.instance_id

    # the MCP call: the server received the worker's span in params._meta
    mcp_call = t.one("execute_tool trace_meta", "toolq-worker")
    assert mcp_call.attributes["toolq.tool.where"] == "mcp" and mcp_call.attributes["gen_ai.tool.type"] == "extension"
    carried = json.loads(results["trace_meta"]["content"])
    assert carried["traceparent"] == f"00-{trace_id}-{mcp_call.span_id}-01"
    assert carried["tracestate"] == "caller=t1"  # the caller's tracestate travels with the trace

    # the worker's log lines written inside a span carry its ids
    lines = [json.loads(line) for line in worker.output().splitlines() if line.startswith("{")]
    generated = [ln for ln in lines if ln.get("event") == "generated" and ln.get("job_id") == job_id]
    assert {ln["span_id"] for ln in generated} == {r.span_id for r in rounds}
    assert {ln["trace_id"] for ln in generated} == {trace_id}


async def test_without_a_traceparent_the_gateway_starts_the_trace(traced):
    receiver, gateway, worker, _ = traced
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": ["convert_glorp", "trace_meta"],
    }
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        # an invalid traceparent is ignored, as W3C says a receiver does: a new trace, never a 4xx
        created = await http.post("/v1/jobs", json=body, headers={"traceparent": "00-not-a-trace"})
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]
        events = sse_events((await http.get(f"/v1/jobs/{job_id}/events")).text)
    assert events[-1]["type"] == "final", worker.output()

    def submitted(spans) -> list:
        return [s for s in spans if s.name == "submit" and s.attributes.get("toolq.job_id") == job_id]

    def complete(spans) -> bool:
        mine = submitted(spans)
        return (
            bool(mine)
            and Trace(spans, mine[0].trace_id).has("attempt", "execute_tool convert_glorp")
            and any(
                s.service == "toolq-tools" for s in Trace(spans, mine[0].trace_id).named("execute_tool convert_glorp")
            )
        )

    spans = receiver.wait_for(complete)
    submit = submitted(spans)[0]
    t = Trace(spans, submit.trace_id)
    above = t.lineage(submit)
    assert (above[-1] if above else submit).parent_id == ""  # the root is the gateway's
    assert t.one("attempt").parent_id == submit.span_id
    assert (
        t.one("execute_tool convert_glorp", "toolq-tools").parent_id
        == t.one("execute_tool convert_glorp", "toolq-worker").span_id
    )


async def test_the_sdk_carries_its_callers_span_in_both_modes(traced, redis_url):
    """An application that traces with OpenTelemetry of its own submits through the SDK inside
    its span: over HTTP the gateway's submit span continues it; in Redis mode the job's record
    carries it, and the worker's spans continue it."""
    from opentelemetry import trace as otel

    from store import keys
    from toolq import Client

    receiver, gateway, _, _ = traced
    r = redis_lib.Redis.from_url(redis_url)
    for mode in ("http", "redis"):
        trace_id, span_id = secrets.randbits(128), secrets.randbits(64)
        caller = otel.NonRecordingSpan(
            otel.SpanContext(trace_id, span_id, is_remote=False, trace_flags=otel.TraceFlags(otel.TraceFlags.SAMPLED))
        )
        client = Client(gateway.url) if mode == "http" else Client(redis_url=redis_url)
        async with client:
            with otel.use_span(caller):
                job_id = await client.submit("hi", model="scripted", tools=["convert_glorp", "trace_meta"])
            await client.result(job_id, timeout=30)
        want = f"{trace_id:032x}"
        t = Trace(receiver.wait_for(lambda spans, w=want: Trace(spans, w).has("attempt")), want)
        if mode == "http":
            submit = t.one("submit", "toolq-gateway")
            above = t.lineage(submit)
            assert (above[-1] if above else submit).parent_id == f"{span_id:016x}"
        else:
            assert r.hget(keys.job(job_id), "traceparent").decode() == f"00-{want}-{span_id:016x}-01"
        assert t.one("attempt", "toolq-worker").attributes["toolq.job_id"] == job_id


async def test_a_thread_run_is_traced_as_a_submitted_job(traced):
    receiver, gateway, worker, _ = traced
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"traceparent": f"00-{trace_id}-{client_span}-01"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        thread_id = (await http.post("/v1/threads", json={})).json()["id"]
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "tools": ["convert_glorp"]}
        created = await http.post(f"/v1/threads/{thread_id}/runs", json=body, headers=headers)
        assert created.status_code in (200, 201, 202), created.text
        job_id = created.json()["job_id"]
        events = sse_events((await http.get(f"/v1/jobs/{job_id}/events")).text)
    assert events[-1]["type"] == "final", worker.output()
    t = Trace(receiver.wait_for(lambda spans: Trace(spans, trace_id).has("submit", "attempt")), trace_id)
    submit = t.one("submit", "toolq-gateway")
    assert submit.attributes["toolq.thread_id"] == thread_id and submit.attributes["toolq.job_id"] == job_id
    above = t.lineage(submit)
    assert (above[-1] if above else submit).parent_id == client_span
    assert t.one("attempt", "toolq-worker").parent_id == submit.span_id
