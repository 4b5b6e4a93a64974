"""The caller's trace context on every request: an ASGI middleware that reads ``traceparent``
and ``tracestate`` and makes them the current context, so the submit span
(gateway/submission.py) is the child of the caller's span. Installed only when tracing is on
(gateway/app.py); a missing or invalid header leaves the context empty and the submit span
starts a new trace, as W3C Trace Context says a receiver does.

When a framework's own server span is current already (FastAPI's built-in telemetry, which
gateway/app.py turns off, or an instrumentation the operator added), it is the caller's child
and this middleware leaves it so: the submit span becomes its child."""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from toolq.tracing import parent_context

_HEADERS = {b"traceparent": "traceparent", b"tracestate": "tracestate"}


class TraceContext:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        current = trace.get_current_span().get_span_context()
        if current.is_valid and not current.is_remote:  # a framework's own server span
            await self.app(scope, receive, send)
            return
        carrier = {_HEADERS[k]: v.decode("latin-1") for k, v in scope["headers"] if k in _HEADERS}
        ctx = parent_context(carrier)
        if ctx is None:
            await self.app(scope, receive, send)
            return
        token = otel_context.attach(ctx)
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)
