"""Submitting a job, for every front door (POST /v1/jobs, the OpenAI-compatible endpoints, thread
and conversation runs), and waiting for its end while the caller is still there.

One door: ``admit`` runs the gateway's checks (the operator's caps, the tenant's token budgets,
the webhook target and the tenant's default webhook, the model and tools against the live
workers) and returns an ``Admitted`` submission, which only it makes; ``enqueue`` and the thread
runs (gateway/threads.py, gateway/openai/conversations.py) take that. The queue bounds (depth,
fair admission, the tenant's ``max_queued``) are not here: the store applies them in the script
that writes the job, for every door alike (store/admission.py), and ``queue_full`` turns
their refusal into the one 429. The job is offered first to the worker holding the longest prefix
of its messages (affinity, store/affinity.py).
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import NamedTuple

from starlette.requests import Request

from gateway.budgets import check_budgets, counted
from gateway.limits import apply_caps
from gateway.state import GatewayState
from store.affinity import preferred_worker
from store.conversation_keys import request_keys
from store.fleet import queue_depths
from store.jobstore import NotSubmitted, QueueAtLimit
from store.submission import Submission
from toolq.errors import BudgetExhausted, QueueFull, ToolqError
from toolq.tenants import TenantPolicy, policy_of
from toolq.tracing import current_carrier, entry_kind, genai, span
from toolq.webhooks.target import settle_webhook
from toolq.wire.protocol import Event, JobRequest


class Admitted:
    """A submission that passed ``admit``: the request as it will run (caps fitted, webhook
    settled), its model, its tenant and the tenant's policy. Made only by ``admit``."""

    __slots__ = ("model", "policy", "request", "tenant")

    def __init__(self, token: object, request: JobRequest, model: str, tenant: str, policy: TenantPolicy):
        if token is not _ADMIT:
            raise TypeError("an Admitted submission is made only by gateway.submission.admit")
        self.request, self.model, self.tenant, self.policy = request, model, tenant, policy


_ADMIT = object()


async def admit(state: GatewayState, request: JobRequest, tenant: str, *, default_webhook: bool = True) -> Admitted:
    """The gateway's checks, for every front door; raises the ToolqError of the first refusal."""
    apply_caps(request, state.settings)
    await check_budgets(state, tenant)
    request = await settle_webhook(request, tenant, state.webhooks, use_default=default_webhook)
    model = (await state.fleet.get()).resolve(request)
    return Admitted(_ADMIT, request, model, tenant, policy_of(state.settings.tenants, tenant))


class Submitted(NamedTuple):
    job_id: str
    model: str | None  # None only for the job an idempotency key already named
    created: bool


async def enqueue(
    state: GatewayState,
    request: JobRequest,
    tenant: str,
    *,
    idempotency_key: str | None = None,
    default_webhook: bool = True,
    spare: bool = False,
) -> Submitted:
    """Check and enqueue a job; ``spare``: a batch line, which only a free engine slot takes
    (store/lua/dispatch.lua). Raises the ToolqError of a refusal (caps, unknown model or tool,
    no worker, QueueFull with Retry-After).

    A retry of a submit that already went through gets its job back (``created`` False), whatever
    the caps, the fleet or the queue say now: that is what makes retrying safe. The submit script
    decides (it owns idempotency), so a refusal from the checks waits until it has looked.

    Traced as the ``submit`` span (under the caller's ``traceparent``, gateway/tracing.py), whose
    context the job's record keeps for the worker's spans."""
    with span("submit", kind=entry_kind(), attributes={genai.TENANT: tenant}) as s:
        submitted = await _enqueue(state, request, tenant, idempotency_key, default_webhook, spare)
        if s.is_recording():
            s.set_attributes({genai.JOB_ID: submitted.job_id, "toolq.created": submitted.created})
            if submitted.model:
                s.set_attribute(genai.REQUEST_MODEL, submitted.model)
        return submitted


async def _enqueue(
    state: GatewayState,
    request: JobRequest,
    tenant: str,
    idempotency_key: str | None,
    default_webhook: bool,
    spare: bool,
) -> Submitted:
    refusal: ToolqError | None = None
    model: str | None = None
    try:
        admitted = await admit(state, request, tenant, default_webhook=default_webhook)
        request, model = admitted.request, admitted.model
    except ToolqError as e:
        if idempotency_key is None:
            raise  # no earlier job to find
        refusal = e
    trace = current_carrier()
    try:
        job_id, created = await state.store.submit(
            Submission(
                request,
                model=model,
                tenant=tenant,
                idempotency_key=idempotency_key,
                policy=policy_of(state.settings.tenants, tenant),
                trace=trace,
                prefer=await _holder(state, request, model),
                unserved_waiting=await _unserved_waiting(state, model),
                spare=spare,
            )
        )
    except QueueAtLimit as e:
        raise queue_full(e, tenant, state) from None
    except BudgetExhausted as e:  # charged in the submit script itself (store/budget_holds.py)
        raise counted(state, tenant, e) from None
    except NotSubmitted:
        assert refusal is not None
        raise refusal from None
    return Submitted(job_id, model, created)


async def _holder(state: GatewayState, request: JobRequest, model: str | None) -> str | None:
    """The live worker of the model that holds the longest prefix of the job's conversation, to
    offer the job to first (store/affinity.py); None when affinity is off or none does."""
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


def queue_full(e: QueueAtLimit, tenant: str, state: GatewayState) -> QueueFull:
    """The 429 (with Retry-After) of a submission the queue bounds refused, for every front door;
    counted in the tenant's refusals. The message names the limit that refused it: the tenant's
    own (``max_queued``, its share of a full queue) or the model's."""
    state.metrics.refused(tenant, "queue_full")
    return QueueFull(f"{e}; retry later", retry_after_s=state.settings.retry_after_s)


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
        async for ev in state.hub.follow(job_id, idle_s=state.settings.keepalive_s):
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
