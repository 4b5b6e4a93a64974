"""A structlog processor: a log line written while a span is current carries its ``trace_id``
and ``span_id`` (hex, as trace backends show them), so logs and traces join on them."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from opentelemetry import trace

from toolq.tracing import switch


def add_trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if not switch.on():
        return event
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event["trace_id"] = format(ctx.trace_id, "032x")
        event["span_id"] = format(ctx.span_id, "016x")
    return event
