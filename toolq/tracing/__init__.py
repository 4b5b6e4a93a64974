"""OpenTelemetry traces of a job, from the caller's ``traceparent`` to the tool that ran.

Off by default and then free: nothing of the SDK is imported, and each hook in the hot paths
reads one flag (``switch.on``). The standard ``OTEL_*`` variables turn it on
(``settings.py``); each service calls ``configure_tracing`` at start and ``shutdown_tracing`` at
the end (``setup.py``). ``carrier.py`` is the context as it travels (HTTP, the job's record, a
tool service's call, an MCP request), ``spans.py`` makes spans, ``tool_span.py`` the span of
a tool call wherever it runs, ``genai.py`` names their attributes, ``log_ids.py`` puts the ids
in log lines. Where each span starts: docs/architecture/tracing.md.
"""

from __future__ import annotations

from toolq.tracing.carrier import TraceCarrier, current_carrier, parent_context
from toolq.tracing.setup import configure_tracing, shutdown_tracing
from toolq.tracing.spans import NO_SPAN, SpanKind, entry_kind, failed, record, span
from toolq.tracing.switch import on

__all__ = [
    "NO_SPAN",
    "SpanKind",
    "TraceCarrier",
    "configure_tracing",
    "current_carrier",
    "entry_kind",
    "failed",
    "on",
    "parent_context",
    "record",
    "shutdown_tracing",
    "span",
]
