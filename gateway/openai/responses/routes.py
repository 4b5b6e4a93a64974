"""The Responses API over toolq jobs: POST /v1/responses (answered, background, or streamed),
GET /v1/responses/{id} (also streamed, resumable with ``starting_after``),
POST /v1/responses/{id}/cancel and DELETE /v1/responses/{id}. One response is one job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import SkipValidation
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from gateway.auth import Tenant
from gateway.off_loop import validated
from gateway.openai import errors
from gateway.openai.conversations import run_in_conversation
from gateway.openai.models import check_model
from gateway.openai.responses.request import ResponsesRequest, to_job
from gateway.openai.responses.shapes import from_job
from gateway.openai.responses.store import StoredResponse, forget, load, new_response_id, save
from gateway.openai.responses.stream import ResponseEvents
from gateway.openai.shared import CLIENT_CLOSED, JOB_HEADER, error_responses, sse_json
from gateway.sse import KEEPALIVE, SEP
from gateway.state import GatewayState, State
from gateway.submission import cancel_soon, submit, terminal_event
from store.errors import RedisError
from store.jobstore import JobNotFound
from store.records import JobRecord
from toolq.errors import EventsGone
from toolq.wire.protocol import JobRequest, Message

router = APIRouter(prefix="/v1/responses", tags=["openai"])
ResponseId = Annotated[str, Path(min_length=1, max_length=128, description="a response id (resp_...)")]
_ERRORS = error_responses(400, 401, 404, 429, 503)
_STREAMED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "a response object, or with stream: response events",
        "content": {"application/json": {}, "text/event-stream": {}},
    }
}
CANCEL_WAIT_S = 5.0  # how long cancel waits for a running job's worker to stop it


async def _record(state: GatewayState, stored: StoredResponse) -> JobRecord:
    try:
        return await state.store.record(stored.job_id)
    except JobNotFound:
        raise errors.OpenAIError(404, f"No response found with id {stored.id!r}.", code="not_found") from None


async def _transcript(state: GatewayState, tenant: str, previous_id: str) -> list[Message]:
    """The conversation of a finished earlier response, without its instructions."""
    prev = await load(state.store.redis, tenant, previous_id, param="previous_response_id")
    rec = await _record(state, prev)
    if not rec.terminal or rec.result is None:
        raise errors.OpenAIError(
            400, f"Previous response {previous_id!r} has not finished yet.", param="previous_response_id"
        )
    return rec.result.messages[prev.instructions :]


@router.post("", responses={**_STREAMED, **_ERRORS})
async def create_response(
    raw: Annotated[ResponsesRequest, SkipValidation, Body()], request: Request, tenant: Tenant, state: State
) -> Response:
    """Create a response: one toolq job. ``background: true`` answers at once with status
    ``queued``; ``stream: true`` streams its events; otherwise the call waits for the answer (and
    a caller that leaves cancels it)."""
    body = await validated(ResponsesRequest, raw)  # after the key; off the loop when large
    earlier = await _transcript(state, tenant, body.previous_response_id) if body.previous_response_id else []
    job = to_job(body, earlier)
    await check_model(state, body.model)
    # a follower's seat before submitting: a 429 for it leaves no job behind
    seat = state.seats.take(tenant) if body.stream or not body.background else None
    try:
        if body.conversation is not None:
            instructions = 1 if body.instructions else 0
            job_id, model = await run_in_conversation(state, tenant, body.conversation, job, instructions=instructions)
        else:
            job_id, model = await submit(state, job, tenant)
        stored = StoredResponse(
            id=new_response_id(),
            job_id=job_id,
            model=model,
            created_at=int(time.time()),
            request=body.model_dump(mode="json", exclude={"input", "toolq"}, exclude_none=True, by_alias=True),
            instructions=1 if body.instructions else 0,
        )
        await save(state.store.redis, tenant, stored, state.store.event_ttl_s)
    except BaseException:
        if seat is not None:
            seat.release()
        raise
    headers = {JOB_HEADER: job_id}
    if seat is None:  # background, not streamed: answered at once
        return JSONResponse(from_job(stored, await _record(state, stored)), headers=headers)
    if body.stream:
        events = seat.hold(_events(state, stored, job, after=-1, cancel_on_leave=not body.background))
        return EventSourceResponse(events, ping=0, sep=SEP, headers={"Cache-Control": "no-cache", **headers})
    with seat:
        if await terminal_event(state, job_id, request) is None:
            return Response(status_code=CLIENT_CLOSED)
    return JSONResponse(from_job(stored, await _record(state, stored)), headers=headers)


@router.get("/{response_id}", responses={**_STREAMED, **_ERRORS})
async def get_response(
    response_id: ResponseId,
    tenant: Tenant,
    state: State,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1, le=2**62)] = None,
) -> Response:
    """The response as it stands; with ``stream=true`` its events (after ``starting_after``),
    then live until it ends. Leaving such a stream never cancels the response."""
    stored = await load(state.store.redis, tenant, response_id)
    rec = await _record(state, stored)
    if not stream:
        return JSONResponse(from_job(stored, rec))
    job = rec.request
    seat = state.seats.take(tenant)
    events = seat.hold(
        _events(state, stored, job, after=-1 if starting_after is None else starting_after, cancel_on_leave=False)
    )
    return EventSourceResponse(events, ping=0, sep=SEP, headers={"Cache-Control": "no-cache"})


@router.post("/{response_id}/cancel", responses=_ERRORS)
async def cancel_response(response_id: ResponseId, tenant: Tenant, state: State) -> JSONResponse:
    """Cancel a queued or running response; answers once its job has ended (a running one stops
    within a token), or after a few seconds with the status it then has."""
    stored = await load(state.store.redis, tenant, response_id)
    await _record(state, stored)
    with suppress(JobNotFound):
        await state.store.cancel(stored.job_id)

    async def ended() -> None:
        async for ev in state.hub.follow(stored.job_id, idle_s=1.0):
            if ev is not None and ev.terminal:
                return

    with suppress(asyncio.TimeoutError, JobNotFound):
        await asyncio.wait_for(ended(), CANCEL_WAIT_S)
    return JSONResponse(from_job(stored, await _record(state, stored)))


@router.delete("/{response_id}", responses=_ERRORS)
async def delete_response(response_id: ResponseId, tenant: Tenant, state: State) -> JSONResponse:
    """Forget a response (its job is cancelled if it still runs)."""
    stored = await load(state.store.redis, tenant, response_id)
    cancel_soon(state, stored.job_id)
    await forget(state.store.redis, tenant, response_id)
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


async def _events(
    state: GatewayState, stored: StoredResponse, job: JobRequest, *, after: int, cancel_on_leave: bool
) -> AsyncIterator[ServerSentEvent]:
    translate = ResponseEvents(stored, job)
    done = False
    try:
        async for event in state.hub.follow(stored.job_id, idle_s=state.settings.keepalive_s, ticks=True):
            if event is None:
                yield ServerSentEvent(comment=KEEPALIVE, sep=SEP)
                continue
            for out in translate.on_event(event):
                if out["sequence_number"] > after:
                    yield ServerSentEvent(sse_json(out), event=out["type"], sep=SEP)
            if event.terminal:
                done = True
                return
    except (JobNotFound, EventsGone, RedisError) as e:
        done = True
        message = f"the response's events could not be read: {type(e).__name__}"
        yield ServerSentEvent(
            sse_json(
                {
                    "type": "error",
                    "code": "unavailable",
                    "message": message,
                    "param": None,
                    "sequence_number": translate.seq + 1,
                }
            ),
            event="error",
            sep=SEP,
        )
    finally:
        if cancel_on_leave and not done:
            cancel_soon(state, stored.job_id)
