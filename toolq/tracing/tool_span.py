"""The span of one executed tool call, wherever it runs: ``execute_tool {name}`` with the GenAI
tool attributes, opened by the worker (worker/traces.py) and, continuing it, by a tool service
(toolq/services/service.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, get_current_span

from toolq.tracing import genai, switch
from toolq.tracing.spans import NO_SPAN, failed, span


def tool_span(
    name: str,
    call_id: str,
    where: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Context | None = None,
    effect_key: str | None = None,
    **extra: Any,
) -> AbstractContextManager[Span]:
    """``effect_key``: the call's key, which ties the worker's span to the tool service's, whose
    call id it is; ``extra``: more attributes (the service instance)."""
    if not switch.on():
        return NO_SPAN
    attributes = {
        genai.OPERATION_NAME: genai.EXECUTE_TOOL,
        genai.TOOL_NAME: name,
        genai.TOOL_CALL_ID: call_id,
        genai.TOOL_TYPE: genai.tool_type(where),
        genai.WHERE: where,
        **({genai.EFFECT_KEY: effect_key} if effect_key else {}),
        **extra,
    }
    return span(f"execute_tool {name}", kind=kind, context=context, attributes=attributes)


def tool_failed(error: str | None) -> None:
    """The current tool span's call failed (an outcome the model reads, not an exception)."""
    failed(get_current_span(), "tool_error", (error or "")[:200])
