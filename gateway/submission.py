"""Submitting a job, for every front door (POST /v1/jobs and the OpenAI-compatible endpoints),
and waiting for its end while the caller is still there.

One path (``enqueue``): the operator's caps, the model and tools against the live workers, then
``JobStore.submit`` with the tenant, the idempotency key and the queue limit, so every front door
shares one queue, one fairness and one 429; and the worker the job is offered to first, the one
holding the longest prefix of its messages (affinity, toolq/store/affinity.py).
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import NamedTuple

from starlette.requests import Request

from gateway.budgets import check_budgets
from gateway.limits import apply_caps
from gateway.state import GatewayState
from gateway.webhook_target import settle_webhook
from toolq.errors import QueueFull, ToolqError
from toolq.protocol import Event, JobRequest
from toolq.store.affinity import preferred_worker
from toolq.store.conversation_keys import request_keys
from toolq.store.fleet import queue_depths
from toolq.store.jobstore import NotSubmitted, QueueAtLimit
from toolq.tenants import policy_of
from toolq.tracing import current_carrier, entry_kind, genai, span


class Submitted(NamedTuple):
    job_id: str
    model: str | None  # None only for the job an idempotency key already named
    created: bool


async def enqueue(
    state: GatewayState, request: JobRequest, tenant: str, *, idempotency_key: str | None = None
) -> Submitted:
    """Check and enqueue a job. Raises the ToolqError of a refusal (caps, unknown model or tool,
    no worker, QueueFull with Retry-After).

    A retry of a submit that already went through gets its job back (``created`` False), whatever
    the caps, the fleet or the queue say now: that is what makes retrying safe. The submit script
    decides (it owns idempotency), so a refusal from the checks waits until it has looked.

    Traced as the ``submit`` span (under the caller's ``traceparent``, gateway/tracing.py), whose
    context the job's record keeps for the worker's spans."""
    with span("submit", kind=entry_kind(), attributes={genai.TENANT: tenant}) as s:
        submitted = await _enqueue(state, request, tenant, idempotency_key)
        if s.is_recording():
            s.set_attributes({genai.JOB_ID: submitted.job_id, "toolq.created": submitted.created})
            if submitted.model:
                s.set_attribute(genai.REQUEST_MODEL, submitted.model)
        return submitted


async def _enqueue(state: GatewayState, request: JobRequest, tenant: str, idempotency_key: str | None) -> Submitted:
    refusal: ToolqError | None = None
    model: str | None = None
    try:
        apply_caps(request, state.settings)
        await check_budgets(state, tenant)
        request = await settle_webhook(request, tenant, state.webhooks)
        model = (await state.fleet.get()).resolve(request)
    except ToolqError as e:
        if idempotency_key is None:
            raise  # no earlier job to find
        refusal = e
    trace = current_carrier()
    try:
        job_id, created = await state.store.submit(
            request,
            model=model,
            tenant=tenant,
            idempotency_key=idempotency_key,
            max_queue_depth=state.settings.max_queue_depth,
            policy=policy_of(state.settings.tenants, tenant),
            traceparent=trace.traceparent if trace else None,
            tracestate=trace.tracestate if trace else None,
            prefer=await _holder(state, request, model),
            unserved_waiting=await _unserved_waiting(state, model),
        )
    except QueueAtLimit as e:
        state.metrics.refused(tenant, "queue_full")
        raise queue_full(e, model, state) from None
    except NotSubmitted:
        assert refusal is not None
        raise refusal from None
    return Submitted(job_id, model, created)


async def _holder(state: GatewayState, request: JobRequest, model: str | None) -> str | None:
    """The live worker of the model that holds the longest prefix of the job's conversation, to
    offer the job to first (toolq/store/affinity.py); None when affinity is off or none does."""
    if model is None or not state.store.affinity_wait_ms:
        return None
    workers = [w.id for w in (await state.fleet.get()).workers_of(model)]
    if len(workers) < 2:
        return None  # one worker gets every job anyway
    return await preferred_worker(state.store.redis, workers, request_keys(model, request))


async def _unserved_waiting(state: GatewayState, model: str | None) -> int | None:
    """The jobs waiting for a declared model no worker serves yet, this one included (for its
    ``queued`` event); None while a worker serves it."""
    if model is None or (await state.fleet.get()).workers_of(model):
        return None
    return (await queue_depths(state.store.redis, [model]))[0] + 1


async def submit(state: GatewayState, request: JobRequest, tenant: str) -> tuple[str, str]:
    """``enqueue`` for a front door without idempotency keys; returns (job id, model)."""
    job_id, model, _ = await enqueue(state, request, tenant)
    assert model is not None  # a job the checks refused is never created
    return job_id, model


def queue_full(e: QueueAtLimit, model: str | None, state: GatewayState) -> QueueFull:
    """The 429 (with Retry-After) of a submit the queue's limit refused, for every front door."""
    return QueueFull(
        f"the queue of model {model!r} is full ({e.depth} jobs, limit {e.limit}); retry later",
        retry_after_s=state.settings.retry_after_s,
    )


_CANCELLING: set[asyncio.Task[object]] = set()  # keeps the tasks of cancel_soon alive until done


def cancel_soon(state: GatewayState, job_id: str) -> None:
    """Cancel the job of a caller that left. A task of its own: it is called while the caller's
    task is being cancelled, or from a generator being closed, where awaiting is not reliable."""

    async def go() -> None:
        with suppress(Exception):
            await state.store.cancel(job_id)

    task = asyncio.ensure_future(go())
    _CANCELLING.add(task)
    task.add_done_callback(_CANCELLING.discard)


async def client_gone(request: Request) -> None:
    """Returns when the client disconnects (its request body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def terminal_event(state: GatewayState, job_id: str, request: Request) -> Event | None:
    """The job's terminal event; None when the client left first, in which case the job is
    cancelled."""

    async def last() -> Event | None:
        async for ev in state.store.follow(job_id, idle_s=state.settings.keepalive_s):
            if ev is not None and ev.terminal:
                return ev
        return None

    follow = asyncio.ensure_future(last())
    gone = asyncio.ensure_future(client_gone(request))
    try:
        await asyncio.wait({follow, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (follow, gone):
            t.cancel()
    if follow.done() and not follow.cancelled():
        return follow.result()
    cancel_soon(state, job_id)
    return None
