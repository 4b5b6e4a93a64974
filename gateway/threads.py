"""/v1/threads: conversations kept on the server, and runs on them (store/threads.py).

Every route is scoped to the caller's tenant: another tenant's thread is a 404, exactly like one
that does not exist. A run passes the same door as POST /v1/jobs (gateway/submission.py: admit,
then the store's queue bounds, store/admission.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query
from pydantic import SkipValidation

from gateway.auth import Tenant
from gateway.budgets import counted
from gateway.off_loop import validated
from gateway.state import GatewayState, State
from gateway.submission import admit, queue_full
from store.admission import QueueAtLimit
from store.threads import RunRejected, ThreadInfo, ThreadLimits, ThreadNotFound, ThreadStore
from toolq.errors import BudgetExhausted, RunActive, ThreadNotFoundError
from toolq.tracing import current_carrier, entry_kind, genai, span
from toolq.wire.api import ErrorBody
from toolq.wire.protocol import JobStatus
from toolq.wire.thread_api import (
    MAX_PAGE,
    MessagePage,
    MessagesAppend,
    RunAccepted,
    RunList,
    RunRequest,
    RunView,
    ThreadCreate,
    ThreadDeleted,
    ThreadList,
    ThreadMessage,
    ThreadSummary,
    ThreadView,
)

router = APIRouter(prefix="/v1/threads", tags=["threads"])
ThreadId = Annotated[str, Path(min_length=1, max_length=128, description="the thread id from POST /v1/threads")]
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 404, 422)}


def threads_of(state: GatewayState) -> ThreadStore:
    """The gateway's one ThreadStore, over its JobStore (made on first use)."""
    found = getattr(state, "_threads", None)
    if found is None:
        s = state.settings
        limits = ThreadLimits(s.thread_ttl_s, s.max_threads, s.max_thread_messages, run_messages=s.max_messages)
        found = ThreadStore(state.store, limits=limits)
        state._threads = found  # type: ignore[attr-defined]
    return found


def not_found(thread_id: str) -> ThreadNotFoundError:
    return ThreadNotFoundError(f"thread {thread_id!r} not found", field="thread_id")


async def info(state: GatewayState, tenant: str, thread_id: str) -> ThreadInfo:
    try:
        return await threads_of(state).get(tenant, thread_id)
    except ThreadNotFound:
        raise not_found(thread_id) from None


def summary(t: ThreadInfo) -> ThreadSummary:
    return ThreadSummary(
        id=t.id,
        created_ms=t.created_ms,
        metadata=t.metadata,
        ttl_s=t.ttl_s,
        active_run=t.active_run,
        waiting_runs=t.waiting,
        message_count=t.message_count,
    )


Order = Literal["asc", "desc"]
After = Annotated[str | None, Query(max_length=128, description="the message id to page on from")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]


async def message_page(
    state: GatewayState, tenant: str, thread_id: str, after: str | None, limit: int, order: Order
) -> MessagePage:
    try:
        chosen, more = await threads_of(state).message_page(tenant, thread_id, after=after, limit=limit, order=order)
    except ThreadNotFound:
        raise not_found(thread_id) from None
    data = [ThreadMessage(id=i, message=m) for i, m in chosen]
    return MessagePage(
        data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None, has_more=more
    )


@router.post("", status_code=201, response_model=ThreadView, responses=_ERRORS)
async def create_thread(body: Annotated[ThreadCreate, Body()], tenant: Tenant, state: State) -> ThreadView:
    """A thread, optionally with its first messages, metadata and a TTL."""
    t = await threads_of(state).create(tenant, metadata=body.metadata, ttl_s=body.ttl_s, messages=body.messages)
    return ThreadView(
        **summary(t).model_dump(),
        messages=await message_page(state, tenant, t.id, None, MAX_PAGE, "asc"),
    )


@router.get("", response_model=ThreadList, responses=_ERRORS)
async def list_threads(
    tenant: Tenant,
    state: State,
    limit: Limit = 20,
    before_ms: Annotated[int | None, Query(ge=0, le=2**53, description="threads created before this")] = None,
) -> ThreadList:
    """The caller's threads, newest first."""
    found = await threads_of(state).tenant_threads(tenant, limit=limit + 1, before_ms=before_ms)
    shown = found[:limit]
    return ThreadList(
        data=[summary(t) for t in shown],
        has_more=len(found) > limit,
        next_before_ms=shown[-1].created_ms if len(found) > limit else None,
    )


@router.get("/{thread_id}", response_model=ThreadView, responses=_ERRORS)
async def get_thread(
    thread_id: ThreadId, tenant: Tenant, state: State, after: After = None, limit: Limit = 20, order: Order = "asc"
) -> ThreadView:
    """The thread and a page of its messages (``after`` a message id, ``limit``, ``order``)."""
    t = await info(state, tenant, thread_id)
    return ThreadView(
        **summary(t).model_dump(), messages=await message_page(state, tenant, thread_id, after, limit, order)
    )


@router.get("/{thread_id}/messages", response_model=MessagePage, responses=_ERRORS)
async def thread_messages(
    thread_id: ThreadId, tenant: Tenant, state: State, after: After = None, limit: Limit = 20, order: Order = "asc"
) -> MessagePage:
    """A page of the thread's messages."""
    return await message_page(state, tenant, thread_id, after, limit, order)


@router.post("/{thread_id}/messages", response_model=MessagePage, responses=_ERRORS)
async def append_messages(
    thread_id: ThreadId, body: Annotated[MessagesAppend, Body()], tenant: Tenant, state: State
) -> MessagePage:
    """Append messages to the thread without running anything; returns them with their ids."""
    try:
        ids = await threads_of(state).add_messages(tenant, thread_id, body.messages)
    except ThreadNotFound:
        raise not_found(thread_id) from None
    data = [ThreadMessage(id=i, message=m) for i, m in zip(ids, body.messages, strict=True)]
    return MessagePage(data=data, first_id=ids[0], last_id=ids[-1], has_more=False)


@router.delete("/{thread_id}", response_model=ThreadDeleted, responses=_ERRORS)
async def delete_thread(thread_id: ThreadId, tenant: Tenant, state: State) -> ThreadDeleted:
    """Delete the thread; its active and waiting runs are cancelled."""
    try:
        await threads_of(state).delete(tenant, thread_id)
    except ThreadNotFound:
        raise not_found(thread_id) from None
    return ThreadDeleted(id=thread_id)


@router.post(
    "/{thread_id}/runs",
    status_code=202,
    response_model=RunAccepted,
    responses={409: {"model": ErrorBody}, 429: {"model": ErrorBody}, 503: {"model": ErrorBody}, **_ERRORS},
)
async def create_run(
    thread_id: ThreadId, raw: Annotated[RunRequest, SkipValidation, Body()], tenant: Tenant, state: State
) -> RunAccepted:
    """Run the thread with new input (``messages``). A run already active on the thread is dealt
    with by ``multitask_strategy``; follow the run at /v1/jobs/{job_id}/events."""
    body = await validated(RunRequest, raw)  # after the key; off the loop when its tools are large
    admitted = await admit(state, body.job(), tenant)
    model = admitted.model
    # traced as a submit is (gateway/submission.py): the run's spans continue this one
    attributes = {genai.TENANT: tenant, genai.REQUEST_MODEL: model, "toolq.thread_id": thread_id}
    with span("submit", kind=entry_kind(), attributes=attributes) as s:
        trace = current_carrier()
        try:
            placed = await threads_of(state).run(
                tenant,
                thread_id,
                admitted.request,
                model=model,
                strategy=body.multitask_strategy,
                keep_partial=body.partial_history,
                policy=admitted.policy,
                trace=trace,
            )
        except ThreadNotFound:
            raise not_found(thread_id) from None
        except RunRejected as e:
            raise RunActive(str(e), field="multitask_strategy") from None
        except QueueAtLimit as e:
            raise queue_full(e, tenant, state) from None
        except BudgetExhausted as e:  # charged in the run's script (store/budget_holds.py)
            raise counted(state, tenant, e) from None
        if s.is_recording():
            s.set_attribute(genai.JOB_ID, placed.job_id)
    return RunAccepted(
        job_id=placed.job_id,
        thread_id=thread_id,
        status=JobStatus.queued,
        state=placed.state,
        active_run=placed.active,
        model=model,
        events=f"/v1/jobs/{placed.job_id}/events",
    )


@router.get("/{thread_id}/runs", response_model=RunList, responses=_ERRORS)
async def list_runs(thread_id: ThreadId, tenant: Tenant, state: State) -> RunList:
    """The thread's runs, oldest first, with their status."""
    try:
        ids = await threads_of(state).runs(tenant, thread_id)
    except ThreadNotFound:
        raise not_found(thread_id) from None
    statuses = await state.store.statuses(ids)
    return RunList(data=[RunView(job_id=j, status=s) for j, s in zip(ids, statuses, strict=True)])
