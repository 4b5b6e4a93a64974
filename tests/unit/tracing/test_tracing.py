"""toolq/tracing and the worker's spans, in one process: when tracing is on, the settings, the
carrier, the log ids, and the spans of a conversation over a scripted engine (the real parts:
template, format, registry, loop). Processes and OTLP: tests/integration/test_traces.py and
tests/e2e/test_traces_real.py."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.tracing import TraceContext
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.processes import REPO
from toolq.services.calls import ServiceCall
from toolq.tools import ToolRegistry
from toolq.tracing import SpanKind, current_carrier, entry_kind, parent_context, span, switch
from toolq.tracing.log_ids import add_trace_ids
from toolq.tracing.settings import TracingSettings
from toolq.wire.protocol import JobRequest, Message
from worker.conversation import ConversationLoop
from worker.formats import get_format
from worker.scripted import ScriptedEngine
from worker.templates import TEMPLATES_DIR, ChatTemplate

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, into memory; off again afterwards (the provider stays, unused:
    the API lets a process set its provider once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    switch.turn_on()
    try:
        yield _EXPORTER
    finally:
        switch.turn_off()
        _EXPORTER.clear()


@pytest.mark.parametrize(
    ("env", "exporters"),
    [
        ({}, []),
        ({"OTEL_SERVICE_NAME": "x"}, []),  # a name alone turns nothing on
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, []),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, []),
        ({"OTEL_SDK_DISABLED": "yes", "OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),  # only "true" disables
        ({"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}, []),
    ],
)
def test_what_turns_tracing_on(monkeypatch, env, exporters):
    for k in list(__import__("os").environ):
        if k.startswith("OTEL_"):
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = TracingSettings()
    assert s.exporters() == exporters
    assert s.enabled is bool(exporters)


def _python(code: str, env: dict[str, str]) -> str:
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**clean, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_off_by_default_builds_nothing_and_imports_no_sdk():
    code = """
        import json, sys
        from gateway.app import create_app
        from gateway.tracing import TraceContext
        from toolq.tracing import configure_tracing, on
        from opentelemetry import trace
        turned_on = configure_tracing("toolq-gateway")
        app = create_app()
        print(json.dumps({
            "on": turned_on or on(),
            "sdk": sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))),
            "provider": type(trace.get_tracer_provider()).__name__,
            "middleware": any(m.cls is TraceContext for m in app.user_middleware),
        }))
    """
    got = json.loads(_python(code, {}))
    assert got == {"on": False, "sdk": [], "provider": "ProxyTracerProvider", "middleware": False}


def test_on_exports_over_otlp_and_flushes_at_shutdown():
    with OtlpReceiver() as receiver:
        code = """
            from toolq.tracing import configure_tracing, shutdown_tracing, span
            assert configure_tracing("toolq-test")
            with span("outer"):
                with span("inner", attributes={"k": 1}):
                    pass
            shutdown_tracing()  # the batch delay is long: only the flush at shutdown sends them
        """
        _python(code, {**receiver.env(), "OTEL_BSP_SCHEDULE_DELAY": "60000"})
        got = receiver.wait_for(lambda s: len(s) >= 2, timeout=5)
    by_name = {s.name: s for s in got}
    assert by_name["inner"].parent_id == by_name["outer"].span_id
    assert by_name["inner"].trace_id == by_name["outer"].trace_id
    assert by_name["inner"].attributes == {"k": 1}
    assert {s.service for s in got} == {"toolq-test"}  # the default name when OTEL_SERVICE_NAME is unset


def test_only_the_provider_module_imports_the_sdk():
    """What keeps tracing-off free: the SDK and exporters load only through toolq/tracing/provider.py
    (import-linter cannot forbid a subpackage of an external package, so this reads the sources)."""
    found = []
    for room in ("toolq", "store", "worker", "gateway", "webhooks"):
        for path in (REPO / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if any(n.startswith(("opentelemetry.sdk", "opentelemetry.exporter")) for n in names):
                    found.append(str(path.relative_to(REPO)))
    assert set(found) == {"toolq/tracing/provider.py"}


def test_an_exporter_toolq_cannot_build_leaves_tracing_off():
    code = """
        from toolq.tracing import configure_tracing, on
        print(configure_tracing("x"), on())
    """
    for env, why in (
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "'zipkin' is not available"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "'grpc' is not available"),
    ):
        out = _python(code, env)  # structlog's default configuration writes the warning here too
        assert out.splitlines()[-1].split() == ["False", "False"]
        assert "tracing stays off" in out and why in out


def test_the_carrier_names_the_current_span(spans):
    assert current_carrier() is None  # no span
    with span("s") as s:
        carrier = current_carrier()
        ctx = s.get_span_context()
    assert carrier is not None
    assert carrier.traceparent == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    # and a span under the context it carries is that span's child, in its trace
    with span("child", context=parent_context(carrier.as_dict())) as child:
        assert child.parent.span_id == ctx.span_id
        assert child.get_span_context().trace_id == ctx.trace_id


@pytest.mark.parametrize(
    "bad", ["", "00-xyz", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "zz-" + "a" * 32 + "-" + "b" * 16 + "-01"]
)
def test_an_invalid_traceparent_names_no_parent(bad):
    assert parent_context({"traceparent": bad}) is None


def test_off_the_carrier_is_none_even_inside_a_span(spans):
    with span("s"):
        switch.turn_off()
        assert current_carrier() is None


def test_log_lines_carry_the_span_ids(spans):
    assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}
    with span("s") as s:
        ctx = s.get_span_context()
        line = add_trace_ids(None, "info", {"event": "x"})
    assert line == {"event": "x", "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
    switch.turn_off()
    with span("s"):
        assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}


def test_a_service_call_carries_its_trace_context():
    fields = {b"call_id": b"c1", b"arguments": b"{}", b"timeout_ms": b"100"}
    assert ServiceCall.from_entry("1-0", fields).trace == {}
    tp = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    traced = ServiceCall.from_entry("1-0", {**fields, b"traceparent": tp.encode(), b"tracestate": b"k=v"})
    assert traced.trace == {"traceparent": tp, "tracestate": "k=v"}


def _by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in finished:
        out.setdefault(s.name, []).append(s)
    return out


async def test_a_conversation_is_a_tree_of_rounds_and_tools(spans):
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    engine = ScriptedEngine([call, "2 + 3 = 5."], name="smol")
    template = ChatTemplate.from_file(TEMPLATES_DIR / "hermes3_tool_calling.j2")
    loop = ConversationLoop(engine, template, get_format("hermes"), reg, tool_timeout_s=5)

    class Sink:
        async def tool_call(self, *a, **kw):
            pass

        async def tool_result(self, *a, **kw):
            pass

        def push_text(self, *a, **kw):
            pass

    request = JobRequest(messages=[Message(role="user", content="2 + 3?")], max_tokens=64, seed=7)
    with span("attempt") as attempt:
        out = await loop.run(request, Sink())
    assert out.content == "2 + 3 = 5."
    got = _by_name(spans.get_finished_spans())
    attempt_id = attempt.get_span_context().span_id
    rounds = got["chat smol"]
    assert len(rounds) == 2
    for i, r in enumerate(sorted(rounds, key=lambda s: s.start_time), 1):
        assert r.parent.span_id == attempt_id
        a = r.attributes
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "smol"
        assert a["gen_ai.request.max_tokens"] == 64 and a["gen_ai.request.seed"] == 7
        assert a["toolq.iteration"] == i
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.response.finish_reasons"] == ("stop",)
        children = {s.name for s in spans.get_finished_spans() if s.parent and s.parent.span_id == r.context.span_id}
        assert children == {"prefill", "decode"}
        assert [e.name for e in r.events] == ["render", "parse"]
        assert all(r.start_time <= e.timestamp <= r.end_time for e in r.events)
        assert all(e.attributes["toolq.duration_ms"] >= 0 for e in r.events)
    for name in ("prefill", "decode"):
        for s in got[name]:
            parent = next(r for r in rounds if r.context.span_id == s.parent.span_id)
            assert parent.start_time <= s.start_time <= s.end_time
    (tool,) = got["execute_tool add"]
    assert tool.parent.span_id == attempt_id  # beside the rounds, as GenAI agent spans are
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "add"
    assert tool.attributes["gen_ai.tool.call.id"] == out.state.messages[2].tool_call_id
    assert tool.attributes["toolq.tool.where"] == "worker"
    assert tool.status.is_ok


async def test_a_failed_tool_marks_its_span(spans):
    reg = ToolRegistry()

    @reg.tool
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)

    call = '<tool_call>\n{"name": "explode", "arguments": {"reason": "x"}}\n</tool_call>'
    engine = ScriptedEngine([call, "It failed."])
    template = ChatTemplate.from_file(TEMPLATES_DIR / "hermes3_tool_calling.j2")
    loop = ConversationLoop(engine, template, get_format("hermes"), reg, tool_timeout_s=5)

    class Sink:
        async def tool_call(self, *a, **kw):
            pass

        async def tool_result(self, *a, **kw):
            pass

    await loop.run(JobRequest(messages=[Message(role="user", content="go")]), Sink())
    (tool,) = _by_name(spans.get_finished_spans())["execute_tool explode"]
    assert not tool.status.is_ok and tool.attributes["error.type"] == "tool_error"


async def test_the_gateway_middleware_makes_the_callers_context_current(spans):
    """What gives the submit span its parent where the installed FastAPI opens no HTTP span of
    its own; where it does, that span is current and the middleware leaves it."""
    seen = []

    async def app(scope, receive, send):
        seen.append(trace.get_current_span().get_span_context())

    tp = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    scope = {"type": "http", "headers": [(b"traceparent", tp.encode()), (b"tracestate", b"k=v")]}
    await TraceContext(app)(scope, None, None)
    assert (f"{seen[0].trace_id:032x}", f"{seen[0].span_id:016x}") == ("ab" * 16, "cd" * 8)
    assert seen[0].trace_state.get("k") == "v"
    assert not trace.get_current_span().get_span_context().is_valid  # detached afterwards
    with span("framework") as framework:
        await TraceContext(app)(scope, None, None)
    assert seen[1].span_id == framework.get_span_context().span_id
    await TraceContext(app)({"type": "http", "headers": [(b"traceparent", b"garbage")]}, None, None)
    assert not seen[2].is_valid


def test_the_submit_span_is_the_server_span_unless_one_of_this_process_is_current(spans):
    assert entry_kind() is SpanKind.SERVER
    remote = parent_context({"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
    token = otel_context.attach(remote)  # what the gateway's middleware does
    try:
        assert entry_kind() is SpanKind.SERVER  # the current span is the caller's, remote
        with span("server", kind=entry_kind()):
            assert entry_kind() is SpanKind.INTERNAL  # under a span of this process
    finally:
        otel_context.detach(token)
