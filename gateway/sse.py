"""Server-Sent Events for a job: replay, follow live, keep-alive, close after the terminal event.

Each event goes out as ``id: <seq>`` / ``event: <type>`` / ``data: <event JSON>``. Because ``id`` is the event's seq, a
client that reconnects with ``Last-Event-ID`` resumes right after the last event it got; JobStore.follow reads the
stream from that seq, so nothing is lost or repeated.

sse-starlette's EventSourceResponse writes the frames, ends the body after the terminal event, and stops following as
soon as the client disconnects: its disconnect listener cancels the follow, which would otherwise sit blocked in XREAD
for nobody until the next keep-alive. On server shutdown it ends every stream, and clients resume on the next gateway.
Its ping task is off: JobStore.follow wakes anyway after ``keepalive_s`` without an event, so the keep-alive comment
goes out only while a job is quiet, and a connection costs no extra task for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from toolq.errors import BadRequest
from toolq.store.jobstore import JobNotFound, JobStore
from toolq.store.records import JobRecord

log = structlog.get_logger("toolq.gateway")

MAX_SEQ = 2**62  # stream ids are 64-bit; a larger "after" would be a Redis error, not a 4xx
RETRY_MS = 1000  # what EventSource clients wait before reconnecting
KEEPALIVE = "keep-alive"  # the comment sent while a job is quiet
SEP = "\n"  # sse-starlette's default is \r\n; the frames have always ended lines with \n


def start_seq(after: int | None, last_event_id: str | None) -> int:
    """The seq to replay after: ``Last-Event-ID`` (sent by a reconnecting client) wins over
    ``?after``, the URL's first start point. BadRequest for an id that is not a seq."""
    if last_event_id is not None and last_event_id.strip():
        text = last_event_id.strip()
        if not (text.isascii() and text.isdigit()) or int(text) > MAX_SEQ:
            raise BadRequest("Last-Event-ID must be an event seq (a non-negative integer)", field="Last-Event-ID")
        return int(text)
    return after or 0


async def job_messages(store: JobStore, job_id: str, after: int, keepalive_s: float) -> AsyncIterator[ServerSentEvent]:
    """Each event after ``after`` as a message, a keep-alive comment on idle ticks; ends after the terminal event."""
    retry: int | None = RETRY_MS  # rides on the first message: one socket write less
    try:
        async for event in store.follow(job_id, after, idle_s=keepalive_s, ticks=True):
            if event is None:
                yield ServerSentEvent(comment=KEEPALIVE, retry=retry, sep=SEP)
            else:
                yield ServerSentEvent(
                    event.model_dump_json(), id=str(event.seq), event=event.type.value, retry=retry, sep=SEP
                )
            retry = None
    except JobNotFound:
        return  # expired while followed: nothing more will come
    except RedisError as e:
        # End the stream; the client reconnects with Last-Event-ID and loses nothing.
        log.warning("event stream interrupted", job_id=job_id, error=str(e))


def events_after(rec: JobRecord, store: JobStore, after: int, keepalive_s: float) -> Response:
    """The job's events after ``after``: 204 when it ended and everything, its terminal event
    included, was delivered (nothing will ever follow; 204 is what tells an EventSource to stop
    reconnecting, and JobStore.follow would wait forever), else the live stream."""
    if rec.terminal and after >= rec.seq:
        return Response(status_code=204)
    return event_stream(store, rec.job_id, after, keepalive_s)


def event_stream(store: JobStore, job_id: str, after: int, keepalive_s: float) -> EventSourceResponse:
    """The job's events after ``after`` as a text/event-stream response."""
    return EventSourceResponse(
        job_messages(store, job_id, after, keepalive_s), ping=0, sep=SEP, headers={"Cache-Control": "no-cache"}
    )
