"""Server-Sent Events for a job: replay, follow live, keep-alive, close after the terminal event.

Each frame is ``id: <seq>`` / ``event: <type>`` / ``data: <event JSON>``. Because ``id`` is the
event's seq, a client that reconnects with ``Last-Event-ID`` resumes right after the last event it
got; JobStore.follow reads the stream from that seq, so nothing is lost or repeated.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import structlog
from redis.exceptions import RedisError
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from toolq.jobstore import JobNotFound, JobStore
from toolq.protocol import Event

log = structlog.get_logger("toolq.gateway")

RETRY_MS = 1000  # what EventSource clients wait before reconnecting
KEEPALIVE = b": keep-alive\n\n"


def frame(event: Event) -> bytes:
    return f"id: {event.seq}\nevent: {event.type.value}\ndata: {event.model_dump_json()}\n\n".encode()


async def event_frames(store: JobStore, job_id: str, after: int,
                       keepalive_s: float) -> AsyncIterator[tuple[bytes, bool]]:
    """(chunk, last) pairs: each event as a frame, a comment on idle ticks; ``last`` is set on the
    terminal event's frame, so the response can end the body with it in the same write."""
    head = f"retry: {RETRY_MS}\n\n".encode()  # rides on the first chunk: one socket write less
    try:
        async for event in store.follow(job_id, after, idle_s=keepalive_s, ticks=True):
            chunk = KEEPALIVE if event is None else frame(event)
            yield head + chunk, event is not None and event.terminal
            head = b""
    except JobNotFound:
        return  # expired while followed: nothing more will come
    except RedisError as e:
        # End the stream; the client reconnects with Last-Event-ID and loses nothing.
        log.warning("event stream interrupted", job_id=job_id, error=str(e))


class EventStreamResponse(StreamingResponse):
    """An SSE response that stops following as soon as the client disconnects.

    Starlette's StreamingResponse notices a gone client only at its next write, which for a quiet
    job is the next keep-alive; until then a Redis connection would sit blocked in XREAD for nobody.
    """

    def __init__(self, frames: AsyncIterator[tuple[bytes, bool]]):
        super().__init__(frames, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        streaming = asyncio.create_task(self._stream(send))
        watching = asyncio.create_task(self._until_disconnect(receive))
        try:
            await asyncio.wait({streaming, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (streaming, watching):
                t.cancel()
            await asyncio.gather(streaming, watching, return_exceptions=True)
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        if streaming.done() and not streaming.cancelled() and streaming.exception() is None and streaming.result():
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass

    async def _stream(self, send: Send) -> bool:
        """Write every frame; True when the body still needs its end (no terminal frame sent)."""
        try:
            async for chunk, last in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    return False
        except OSError:
            return False
        return True

    @staticmethod
    async def _until_disconnect(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
