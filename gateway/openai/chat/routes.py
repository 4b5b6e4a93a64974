"""POST /v1/chat/completions: one toolq job per request, answered or streamed in OpenAI's shapes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse
from pydantic import SkipValidation
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from gateway.auth import Tenant
from gateway.off_loop import validated
from gateway.openai import errors
from gateway.openai.chat.request import ChatCompletionRequest, to_job
from gateway.openai.chat.shapes import ChunkWriter, completion
from gateway.openai.chat.stream import ChatStream
from gateway.openai.models import check_model
from gateway.openai.shared import CLIENT_CLOSED, JOB_HEADER, error_responses, sse_json
from gateway.sse import KEEPALIVE, SEP
from gateway.state import GatewayState, State
from gateway.submission import cancel_soon, submit, terminal_event
from store.errors import RedisError
from store.jobstore import JobNotFound
from toolq.errors import EventsGone
from toolq.wire.payloads import FinalData, payload
from toolq.wire.protocol import EventType, JobRequest

router = APIRouter(prefix="/v1", tags=["openai"])
_ERRORS = error_responses(400, 401, 404, 409, 429, 503)


@router.post(
    "/chat/completions",
    responses={
        200: {
            "description": "a chat.completion object, or with stream: chat.completion.chunk events then [DONE]",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **_ERRORS,
    },
)
async def create_chat_completion(
    raw: Annotated[ChatCompletionRequest, SkipValidation, Body()], request: Request, tenant: Tenant, state: State
) -> Response:
    """OpenAI's Chat Completions over the toolq queue. The caller's tools come back as
    ``tool_calls`` (finish_reason ``tool_calls``); the extension field ``toolq.server_tools`` runs
    served tools in the worker's loop. A caller that disconnects cancels the job."""
    body = await validated(ChatCompletionRequest, raw)  # after the key; off the loop when large
    job = to_job(body)
    await check_model(state, body.model)
    seat = state.seats.take(tenant)  # before submitting: a 429 for the follower leaves no job behind
    try:
        job_id, model = await submit(state, job, tenant)
    except BaseException:
        seat.release()
        raise
    created = int(time.time())
    headers = {JOB_HEADER: job_id}
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        writer = ChunkWriter(job_id, model, created, include_usage=include_usage)
        return EventSourceResponse(
            seat.hold(_chunks(state, job_id, job, writer)),
            ping=0,
            sep=SEP,
            headers={"Cache-Control": "no-cache", **headers},
        )
    with seat:
        event = await terminal_event(state, job_id, request)
    if event is None:
        return Response(status_code=CLIENT_CLOSED)
    if event.type != EventType.final:
        raise errors.job_failure(payload(event))
    return JSONResponse(completion(job_id, model, created, FinalData.of(event)), headers=headers)


async def _chunks(
    state: GatewayState, job_id: str, job: JobRequest, writer: ChunkWriter
) -> AsyncIterator[ServerSentEvent]:
    stream = ChatStream(writer, job)
    done = False
    try:
        yield ServerSentEvent(sse_json(stream.start()), sep=SEP)
        async for event in state.hub.follow(job_id, idle_s=state.settings.keepalive_s, ticks=True):
            if event is None:
                yield ServerSentEvent(comment=KEEPALIVE, sep=SEP)
                continue
            if event.type == EventType.final:
                for chunk in stream.final(FinalData.of(event)):
                    yield ServerSentEvent(sse_json(chunk), sep=SEP)
                done = True
                yield ServerSentEvent("[DONE]", sep=SEP)
                return
            if event.terminal:
                done = True
                err = errors.job_failure(payload(event))
                yield ServerSentEvent(
                    sse_json(errors.body(err.status, err.message, param=None, code=err.code)), sep=SEP
                )
                return
            for chunk in stream.on_event(event):
                yield ServerSentEvent(sse_json(chunk), sep=SEP)
    except (JobNotFound, EventsGone, RedisError) as e:
        done = True  # nothing to cancel (expired) or no way to now; tell the caller and end
        err = errors.OpenAIError(503, f"the job's events could not be read: {type(e).__name__}", code="unavailable")
        yield ServerSentEvent(sse_json(errors.body(503, err.message, param=None, code=err.code)), sep=SEP)
    finally:
        if not done:
            cancel_soon(state, job_id)  # the caller left mid-stream
