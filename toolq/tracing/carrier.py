"""A trace context as it travels outside a process: W3C ``traceparent`` and ``tracestate``.

It rides on the HTTP request (gateway/tracing.py), in the job's record (``traceparent`` and
``tracestate`` fields, written by store/lua/submit.lua), in a tool service's call message
(store/lua/service_call.lua) and in an MCP request's ``params._meta`` (toolq/mcp/
connection.py, the keys MCP reserves for it). A context that is not valid W3C is ignored, as the
W3C rule says: the receiver then starts a trace of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from toolq.tracing import switch

__all__ = ["TraceCarrier", "caller_carrier", "current_carrier", "parent_context"]

_W3C = TraceContextTextMapPropagator()
MAX_TRACESTATE = 512  # the W3C recommendation for what a receiver must keep


class TraceCarrier(NamedTuple):
    traceparent: str
    tracestate: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"traceparent": self.traceparent, **({"tracestate": self.tracestate} if self.tracestate else {})}


def current_carrier() -> TraceCarrier | None:
    """The current span's context, to send along; None when tracing is off or no span is current."""
    if not switch.on():
        return None
    return caller_carrier()


def caller_carrier() -> TraceCarrier | None:
    """The current span's context whoever made it: for the SDK (toolq/client/), whose caller
    traces with OpenTelemetry of its own, not with toolq's switch. With the API alone (no SDK
    installed) no span is ever current, and this is None."""
    out: dict[str, str] = {}
    _W3C.inject(out)
    parent = out.get("traceparent")
    if not parent:
        return None
    return TraceCarrier(parent, out.get("tracestate", "")[:MAX_TRACESTATE])


def parent_context(carrier: Mapping[str, str] | None) -> Context | None:
    """The remote parent a carrier names (keys ``traceparent``, ``tracestate``), or None when it
    names none that is valid."""
    if not carrier or not carrier.get("traceparent"):
        return None
    ctx = _W3C.extract(carrier)
    return ctx if ctx else None
