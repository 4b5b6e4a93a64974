"""Server-Sent Events for a job: replay, follow live, keep-alive, close after the terminal event.

Each event goes out as ``id: <seq>`` / ``event: <type>`` / ``data: <event JSON>``. Because ``id`` is the event's seq, a
client that reconnects with ``Last-Event-ID`` resumes right after the last event it got; the gateway's EventHub
(store/event_hub.py) reads the stream from that seq and then hands over the live events, so nothing is lost or
repeated, and a start point that cannot be served (past the end, or trimmed) is answered at once (events_after).

sse-starlette's EventSourceResponse writes the frames, ends the body after the terminal event, and stops following as
soon as the client disconnects: its disconnect listener cancels the follow, which gives back its seat and, for the
job's last follower here, its channel on the hub. On server shutdown it ends every stream, and clients resume on the
next gateway. Its ping task is off: the hub's follow wakes anyway after ``keepalive_s`` without an event, so the
keep-alive comment goes out only while a job is quiet, and a connection costs no extra task for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from gateway.state import GatewayState
from store.errors import RedisError
from store.event_hub import EventHub
from store.jobstore import JobNotFound
from store.records import JobRecord
from toolq.errors import BadRequest, EventsGone, EventsPastEnd

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


async def job_messages(hub: EventHub, job_id: str, after: int, keepalive_s: float) -> AsyncIterator[ServerSentEvent]:
    """Each event after ``after`` as a message, a keep-alive comment on idle ticks; ends after the terminal event."""
    retry: int | None = RETRY_MS  # rides on the first message: one socket write less
    try:
        async for event in hub.follow(job_id, after, idle_s=keepalive_s, ticks=True):
            if event is None:
                yield ServerSentEvent(comment=KEEPALIVE, retry=retry, sep=SEP)
            else:
                yield ServerSentEvent(
                    event.model_dump_json(), id=str(event.seq), event=event.type.value, retry=retry, sep=SEP
                )
            retry = None
    except JobNotFound:
        return  # expired while followed: nothing more will come
    except EventsGone as e:
        # The log was trimmed past this stream while it lagged: say so and end; the reconnect with
        # Last-Event-ID is answered 410 at once, naming the range (events_after).
        yield ServerSentEvent(comment=e.message, sep=SEP)
    except RedisError as e:
        # End the stream; the client reconnects with Last-Event-ID and loses nothing.
        log.warning("event stream interrupted", job_id=job_id, error=str(e))


async def events_after(state: GatewayState, rec: JobRecord, after: int) -> Response:
    """The job's events after ``after``, or an answer at once when none can be streamed:

    - 204 when it ended and everything, its terminal event included, was delivered (nothing will
      ever follow; 204 is what tells an EventSource to stop reconnecting);
    - 416 ``events_past_end`` when ``after`` is past the job's last event: no event carried that
      seq, and following from there would silently skip the events, the terminal one included,
      up to it;
    - 410 ``events_gone`` when the job's log no longer holds the events right after ``after`` (its
      stream is capped: ``JobStore.stream_maxlen``);
    - 429 ``too_many_followers`` past the tenant's cap of followers on this gateway;
    - else the live stream."""
    if after > rec.seq:
        raise EventsPastEnd(
            f"start point {after} (Last-Event-ID or after) is past the last event of job {rec.job_id!r}, "
            f"seq {rec.seq}; follow from after={rec.seq} or less",
            field="Last-Event-ID",
        )
    if rec.terminal and after == rec.seq:
        return Response(status_code=204)
    first = await state.hub.first_seq(rec.job_id)
    if first is None or first > after + 1:
        held = "none of them" if first is None else f"seq {first} on"
        raise EventsGone(
            f"events {after + 1}..{(first or rec.seq + 1) - 1} of job {rec.job_id!r} were trimmed from its log "
            f"(it holds {held}); the job's record (GET /v1/jobs/{rec.job_id}) still has its result",
            field="Last-Event-ID",
        )
    seat = state.seats.take(rec.tenant)
    return event_stream(seat.hold(job_messages(state.hub, rec.job_id, after, state.settings.keepalive_s)))


def event_stream(messages: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    """Messages as a text/event-stream response."""
    return EventSourceResponse(messages, ping=0, sep=SEP, headers={"Cache-Control": "no-cache"})
