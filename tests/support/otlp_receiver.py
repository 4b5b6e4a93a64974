"""An OTLP/HTTP trace receiver for tests and benchmarks: a small HTTP server on a free port that
takes ``POST /v1/traces`` (protobuf, as toolq's exporter sends it, gzip or not), decodes each
payload with opentelemetry-proto's ``ExportTraceServiceRequest`` and keeps the spans, or
discards them unread (``keep=False``, the benchmark's sink)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "ReceivedSpan", "Trace"]


@dataclass(frozen=True)
class ReceivedSpan:
    service: str  # the resource's service.name
    name: str
    trace_id: str  # hex, as traceparent writes it
    span_id: str
    parent_id: str  # '' for a root span
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    events: tuple[str, ...] = ()  # the span's events, by name, in order


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name", "")),
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        kind=s.kind,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        status_code=s.status.code,
                        events=tuple(e.name for e in s.events),
                    )
                )
    return out


class OtlpReceiver:
    def __init__(self, *, keep: bool = True):
        self.keep = keep
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _take(self, body: bytes) -> None:
        spans = decode(body) if self.keep else []
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def env(self, service_name: str | None = None, delay_ms: int | None = 50) -> dict[str, str]:
        """The OTEL_* variables that make a toolq process export here: ``delay_ms`` after each
        span by default (the tests), or with the SDK's own batching when None (5 s or 512 spans)."""
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        if delay_ms is not None:
            env["OTEL_BSP_SCHEDULE_DELAY"] = str(delay_ms)
        if service_name:
            env["OTEL_SERVICE_NAME"] = service_name
        return env

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 20.0) -> list[ReceivedSpan]:
        """The spans received once ``done`` holds for them; TimeoutError with what came otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted(f"{s.service}:{s.name}" for s in spans)
                raise TimeoutError(f"the spans did not all arrive within {timeout}s; received: {names}")
            time.sleep(0.05)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Trace:
    """The spans of one trace, looked up by name (and service)."""

    def __init__(self, spans: list[ReceivedSpan], trace_id: str):
        self.trace_id = trace_id
        self.spans = [s for s in spans if s.trace_id == trace_id]

    def named(self, name: str, service: str | None = None) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name and (service is None or s.service == service)]

    def one(self, name: str, service: str | None = None) -> ReceivedSpan:
        found = self.named(name, service)
        assert len(found) == 1, (
            f"{len(found)} spans {name!r} ({service}) in {sorted((s.service, s.name) for s in self.spans)}"
        )
        return found[0]

    def children(self, parent: ReceivedSpan) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.parent_id == parent.span_id]

    def lineage(self, s: ReceivedSpan) -> list[ReceivedSpan]:
        """The span's ancestors in this trace, nearest first; the last one's parent is outside it
        (the caller's span) or none (a root)."""
        by_id = {x.span_id: x for x in self.spans}
        out = []
        while s.parent_id in by_id:
            s = by_id[s.parent_id]
            out.append(s)
        return out

    def has(self, *names: str) -> bool:
        return all(self.named(n) for n in names)
