"""/v1/jobs: submit, read, follow (SSE) and cancel jobs; every one scoped to the caller's tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Response
from pydantic import SkipValidation

from gateway.auth import Tenant
from gateway.off_loop import validated
from gateway.sse import MAX_SEQ, events_after, start_seq
from gateway.state import GatewayState, State
from gateway.submission import enqueue
from store.jobstore import JobNotFound
from store.records import JobRecord
from toolq.errors import JobNotFoundError
from toolq.wire.api import CancelView, ErrorBody, JobAccepted, JobView, Links
from toolq.wire.protocol import JobRequest, JobStatus

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[str, Path(min_length=1, max_length=128, description="the job id from POST /v1/jobs")]
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 404, 422)}


async def owned(state: GatewayState, job_id: str, tenant: str) -> JobRecord:
    """The job's record, or 404 when it does not exist or belongs to another tenant (which must
    look exactly like a job that does not exist)."""
    try:
        rec = await state.store.record(job_id)
    except JobNotFound:
        rec = None
    if rec is None or rec.tenant != tenant or not rec.submitted:
        raise JobNotFoundError.of(job_id)
    return rec


async def own(state: GatewayState, job_id: str, tenant: str) -> None:
    """``owned`` for a caller that needs no record: one field read (JobStore.owner), never the
    record, which holds the whole conversation."""
    if await state.store.owner(job_id) != tenant:
        raise JobNotFoundError.of(job_id)


@router.post(
    "",
    status_code=202,
    response_model=JobAccepted,
    responses={
        200: {"model": JobAccepted, "description": "the job an Idempotency-Key already named"},
        413: {"model": ErrorBody},
        429: {"model": ErrorBody},
        503: {"model": ErrorBody},
        **_ERRORS,
    },
)
async def submit_job(
    response: Response,
    body: Annotated[JobRequest, SkipValidation, Body()],
    tenant: Tenant,
    state: State,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=256)] = None,
) -> JobAccepted:
    """Validate a conversation job, check its model and tools against the live workers, enqueue it."""
    # validated here (SkipValidation), after the key was checked, off the loop when its tools are large
    request = await validated(JobRequest, body)
    key = idempotency_key or request.idempotency_key
    job_id, model, created = await enqueue(state, request, tenant, idempotency_key=key)
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    if not created:  # the job the key already names
        response.status_code = 200
        return (await owned(state, job_id, tenant)).accepted(created=False)
    assert model is not None  # the submit script creates a job only when the checks chose its model
    return JobAccepted(job_id=job_id, status=JobStatus.queued, model=model, created=True, links=Links.of(job_id))


@router.get("/{job_id}", response_model=JobView, responses=_ERRORS)
async def get_job(job_id: JobId, tenant: Tenant, state: State) -> JobView:
    """The job's status, and its result once it has ended."""
    return (await owned(state, job_id, tenant)).view()


@router.get(
    "/{job_id}/events",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "the job's events as Server-Sent Events"},
        204: {"description": "the job ended and no event follows the given seq"},
        400: {"model": ErrorBody},
        410: {"model": ErrorBody, "description": "the events after the given seq were trimmed from the job's log"},
        416: {"model": ErrorBody, "description": "the given seq is past the job's last event"},
        429: {"model": ErrorBody, "description": "the tenant follows as many event streams here as its cap allows"},
        **_ERRORS,
    },
)
async def job_events(
    job_id: JobId,
    tenant: Tenant,
    state: State,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="replay events after this seq")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=32)] = None,
):
    """Replay the job's events (from the start, ``?after=seq`` or ``Last-Event-ID``), then follow live
    until the terminal event. ``id`` is the event's seq; comments keep an idle connection alive."""
    start = start_seq(after, last_event_id)
    rec = await owned(state, job_id, tenant)
    return await events_after(state, rec, start)


@router.post("/{job_id}/cancel", response_model=CancelView, responses=_ERRORS)
async def cancel_job(job_id: JobId, tenant: Tenant, state: State) -> CancelView:
    """Cancel a queued job at once, or ask its worker to stop a running one (within a token)."""
    await own(state, job_id, tenant)
    return await cancel_owned(state, job_id)


async def cancel_owned(state: GatewayState, job_id: str) -> CancelView:
    """Cancel a job whose caller was found to own it (the dashboard's cancel too: gateway/ui/api.py)."""
    try:
        status = await state.store.cancel(job_id)
    except JobNotFound:
        raise JobNotFoundError.of(job_id) from None
    return CancelView(job_id=job_id, status=status)
