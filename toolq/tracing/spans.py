"""Making spans, at the cost of one flag read when tracing is off.

``span`` is a span for a block of code, current inside it (so logs and calls made within carry
it); ``record`` is a span whose times are known after the fact (the wait in the queue, the
engine's prefill and decode, from the figures it reports). Both go through the API tracer.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from toolq.tracing import switch

__all__ = ["NO_SPAN", "SpanKind", "entry_kind", "failed", "record", "span"]

Attributes = Mapping[str, Any]

# What every hook gets while tracing is off: one shared context manager, whose span takes any
# attribute and records nothing.
NO_SPAN: AbstractContextManager[Span] = nullcontext(trace.INVALID_SPAN)


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes | None = None,
    context: Context | None = None,
    start_ns: int | None = None,
) -> AbstractContextManager[Span]:
    """A span around a block, current within it; ``context`` names a remote parent (else the
    current span is the parent). An exception leaving the block is recorded and sets the status."""
    if not switch.on():
        return NO_SPAN
    return switch.tracer().start_as_current_span(
        name, context=context, kind=kind, attributes=attributes, start_time=start_ns
    )


def record(
    name: str,
    start_ns: int,
    end_ns: int,
    *,
    attributes: Attributes | None = None,
    context: Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> None:
    """A span that began and ended at known times, a child of the current span (or of ``context``)."""
    if not switch.on():
        return
    s = switch.tracer().start_span(name, context=context, kind=kind, attributes=attributes, start_time=start_ns)
    s.end(end_time=max(start_ns, end_ns))


def failed(s: Span, error_type: str, message: str | None = None) -> None:
    """Mark a span as failed without an exception (a tool's failed outcome, a refused job)."""
    if s.is_recording():
        s.set_attribute("error.type", error_type)
        s.set_status(Status(StatusCode.ERROR, message))


def entry_kind() -> SpanKind:
    """SERVER for the first span of a request in this process (its parent, if any, is the
    caller's, remote), INTERNAL under a server span of this process (a framework's own)."""
    current = trace.get_current_span().get_span_context()
    return SpanKind.SERVER if (not current.is_valid or current.is_remote) else SpanKind.INTERNAL
