"""``Client``: the async SDK, the same over either transport (toolq/client/transport.py). It owns
the policy: events resumed from the last seq after a drop, with backoff, each event handed out
once; waiting for a result; answering pauses with the caller's own functions (``run``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import httpx

from toolq import errors
from toolq.client.http_transport import HttpTransport
from toolq.client.threads import ThreadMethods
from toolq.client.transport import Retryable, StreamEnded, Transport
from toolq.client.webhooks import WebhookMethods
from toolq.client_tools import Approver, ClientTools
from toolq.wire.api import ApprovalDecision, JobView, ModelView, ToolResult, ToolSpec
from toolq.wire.payloads import RequiresActionData
from toolq.wire.protocol import Event, EventType, JobRequest, JobResult, JobStatus, Message, PendingAction

__all__ = ["Client", "Functions", "build_request"]

Functions = Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]]


def build_request(request: JobRequest | str | None = None, **fields: Any) -> JobRequest:
    """A JobRequest from a JobRequest, a prompt (with an optional ``system=``) or bare fields."""
    system = fields.pop("system", None)
    if isinstance(request, JobRequest):
        return JobRequest.model_validate({**request.model_dump(exclude_unset=True), **fields})
    if isinstance(request, str):
        messages = [Message(role="system", content=system)] if system else []
        messages.append(Message(role="user", content=request))
        return JobRequest(messages=messages, **fields)
    if request is None:
        return JobRequest(**fields)
    raise TypeError(f"submit() takes a JobRequest or a prompt string, not {type(request).__name__}")


class Client(ThreadMethods, WebhookMethods):
    """Async SDK. HTTP mode over the gateway by default; Redis mode with ``redis_url``; or any
    ``transport``."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        redis_url: str | None = None,
        timeout: float = 30.0,
        reconnect_attempts: int = 20,
        stream_read_timeout: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
    ):
        self.direct = redis_url is not None
        self.reconnect_attempts = reconnect_attempts
        self.url: str | None = None
        self.transport: Transport
        if transport is not None:
            self.transport = transport
        elif redis_url is not None:
            try:  # the store, on redis-py: the `redis` extra, which the light client leaves out
                from toolq.client.redis_transport import RedisTransport
            except ImportError as e:
                raise ImportError(f"the Redis mode needs the redis extra ({e}): pip install 'toolq[redis]'") from e

            self.transport = RedisTransport(redis_url)
        else:
            http = HttpTransport(
                url, api_key, timeout=timeout, stream_read_timeout=stream_read_timeout, http_client=http_client
            )
            self.url, self.transport = http.url, http

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ jobs

    async def submit(
        self, request: JobRequest | str | None = None, *, idempotency_key: str | None = None, **fields: Any
    ) -> str:
        """Submit a job; returns its id. ``request`` is a JobRequest or a prompt; ``fields`` are
        JobRequest fields (tools, tool_choice, max_iterations, model, ...) plus ``system``."""
        return await self.transport.submit(build_request(request, **fields), idempotency_key)

    async def job(self, job_id: str) -> JobView:
        """Status and, once ended, result of a job."""
        return await self.transport.job(job_id)

    async def events(self, job_id: str, after: int | None = None) -> AsyncGenerator[Event, None]:
        """Every event of the job after ``after`` (default: from the start), live until the
        terminal one. A dropped connection is resumed from the last seq received, so each event
        comes exactly once; after ``reconnect_attempts`` failures in a row it gives up."""
        last = after or 0
        failures = 0
        while True:
            progressed = False
            source = self.transport.events(job_id, last)
            error: BaseException | None = None  # None: the stream ended without a terminal event (a restart)
            try:
                async with aclosing(source):  # closes the HTTP stream even if the caller stops early
                    async for event in source:
                        if event.seq <= last:
                            continue  # defensive: never hand out an event twice
                        last, progressed = event.seq, True
                        yield event
                        if event.terminal:
                            return
            except StreamEnded:
                return
            except Retryable as e:
                error = e
            failures = 0 if progressed else failures + 1
            if failures > self.reconnect_attempts:
                raise errors.Unavailable(f"lost the event stream of job {job_id} after {failures} attempts: {error}")
            await asyncio.sleep(min(0.05 * 2 ** min(failures, 6), 2.0))

    async def result(self, job_id: str, timeout: float | None = None) -> JobResult:
        """Wait for the job to end and return its result; TimeoutError after ``timeout`` seconds."""

        async def wait() -> JobResult:
            view = await self.job(job_id)
            if view.result is not None:
                return view.result
            async for event in self.events(job_id):
                if event.terminal:
                    break
            view = await self.job(job_id)
            assert view.result is not None, "a terminal event is always stored with its result"
            return view.result

        try:
            return await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            raise TimeoutError(f"job {job_id} did not end within {timeout} s") from None

    async def cancel(self, job_id: str) -> JobStatus:
        """Cancel a queued or running job; returns the status right after (running while the
        worker is stopping it; the ``cancelled`` event follows)."""
        return await self.transport.cancel(job_id)

    # ------------------------------------------------------------------ paused jobs

    async def submit_tool_results(self, job_id: str, results: Sequence[ToolResult | dict[str, Any]]) -> JobView:
        """Post the results of client-executed calls of a paused job (``{tool_call_id, content,
        is_error?}`` each); the job resumes once every call it waits on is answered."""
        checked = [ToolResult.model_validate(r) for r in results]
        return await self.transport.answer(job_id, checked, "client")

    async def submit_approvals(self, job_id: str, decisions: Sequence[ApprovalDecision | dict[str, Any]]) -> JobView:
        """Approve or deny calls of a paused job (``{tool_call_id, approved, reason?}`` each)."""
        checked = [ApprovalDecision.model_validate(d) for d in decisions]
        return await self.transport.answer(job_id, checked, "approval")

    async def run(
        self,
        request: JobRequest | str | None = None,
        *,
        client_tools: Functions = (),
        approve: Approver | None = None,
        timeout: float | None = None,
        tool_timeout_s: float = 300.0,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> JobResult:
        """Submit a job whose ``client_tools`` (Python functions, sync or async, by name or a list)
        run here, answer every pause until the job ends, and return its result.

        The functions are offered to the model alongside the request's ``tools`` (with ``tools``
        unset, the job gets only them). Calls that need approval are put to ``approve(call) ->
        bool | (bool, reason)``; without it they are denied. A function that raises answers with
        an error result, as a worker's tool does.
        """
        tools = ClientTools(client_tools, approve=approve, timeout_s=tool_timeout_s)
        req = build_request(request, **fields)
        have = set(req.tool_names())
        extra = [d for d in tools.definitions() if d.name not in have]
        if extra:
            req = build_request(req, tools=[*(req.tools or []), *extra])
        job_id = await self.submit(req, idempotency_key=idempotency_key)

        async def follow() -> JobResult:
            async for event in self.events(job_id):
                if event.type == EventType.requires_action:
                    await self._answer_pause(job_id, RequiresActionData.of(event).calls, tools)
            return await self.result(job_id)

        try:
            return await asyncio.wait_for(follow(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"job {job_id} did not end within {timeout} s") from None

    async def _answer_pause(self, job_id: str, calls: list[PendingAction], tools: ClientTools) -> None:
        decisions = [await tools.decision(c) for c in calls if c.kind == "approval"]
        results = [await tools.result(c) for c in calls if c.kind == "client"]
        try:
            if decisions:
                await self.submit_approvals(job_id, decisions)
            if results:
                await self.submit_tool_results(job_id, results)
        except errors.Conflict:
            pass  # the job ended (cancelled, past its deadline) meanwhile: its terminal event follows

    # ------------------------------------------------------------------ catalog

    async def tools(self) -> list[ToolSpec]:
        """Tools the live workers serve (OpenAI function specs), with the models serving each."""
        return await self.transport.tools()

    async def models(self) -> list[ModelView]:
        """Models the live workers serve, with worker counts and queue depth."""
        return await self.transport.models()
