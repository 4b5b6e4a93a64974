"""The one seam between the SDK and where its jobs live: a ``Transport`` does one request of each
kind, over HTTP to the gateway (``HttpTransport``) or straight into Redis (``RedisTransport``).

It is narrow on purpose, as httpx's transports are under its client: no retries, no resume, no
waiting. ``Client`` (toolq/client/client.py) owns that policy and is the same over either. A
transport raises the SDK's own errors (toolq.errors); while following events it raises
``StreamEnded`` when the job has ended and everything after the asked seq was delivered, and
``Retryable`` for a failure worth reconnecting after (a dropped connection, a 5xx, Redis away).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from importlib.util import find_spec
from typing import TYPE_CHECKING, Protocol

from toolq.wire.api import ApprovalDecision, JobView, ModelView, ToolResult, ToolSpec
from toolq.wire.protocol import ActionKind, Event, JobRequest, JobStatus

if TYPE_CHECKING:
    from toolq.tracing.carrier import TraceCarrier

__all__ = ["Retryable", "StreamEnded", "Transport", "caller_trace"]


def caller_trace() -> TraceCarrier | None:
    """The caller's current span, so that the job's spans continue its trace; None where
    OpenTelemetry is not installed (the light client, pyproject.toml): no span can be current then."""
    if find_spec("opentelemetry") is None:
        return None
    from toolq.tracing.carrier import caller_carrier

    return caller_carrier()


class StreamEnded(Exception):
    """The job has ended and every event after the asked seq was delivered."""


class Retryable(Exception):
    """The event stream broke in a way worth reconnecting for."""


class Transport(Protocol):
    async def submit(self, request: JobRequest, idempotency_key: str | None) -> str:
        """Enqueue the job; its id."""
        ...

    async def job(self, job_id: str) -> JobView: ...

    def events(self, job_id: str, after: int) -> AsyncGenerator[Event, None]:
        """One pass over the job's events after ``after``: replayed, then live, until the terminal
        one or a failure (``Retryable``); ``StreamEnded`` when there is nothing left to send."""
        ...

    async def cancel(self, job_id: str) -> JobStatus: ...

    async def answer(self, job_id: str, answers: Sequence[ToolResult | ApprovalDecision], kind: ActionKind) -> JobView:
        """Record answers to a paused job (all of ``kind``); the job as it stands after."""
        ...

    async def tools(self) -> list[ToolSpec]: ...

    async def models(self) -> list[ModelView]: ...

    async def aclose(self) -> None: ...
