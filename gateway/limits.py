"""Request limits: body size (413, before anything parses it) and the caps on a job (422).

Caps answer with the field and the limit in the message, e.g. ``max_tokens 9000 is above the
limit of 4096``. A field the caller left out gets the protocol default, lowered to the cap if the
operator set the cap below it, rather than refusing a request that asked for nothing.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import send_error
from gateway.settings import GatewaySettings
from toolq.errors import BodyTooLarge, LimitExceeded
from toolq.wire.protocol import JobRequest


class BodySizeLimit:
    """Pure ASGI middleware: reads the body up to the limit and answers 413 past it.

    Counting the bytes as they arrive (not trusting Content-Length alone) also stops a chunked
    upload with no length; the body, once read, is handed to the app unchanged.

    Most HTTP clients (httpx, requests) write the whole body before they read an answer, so a 413
    sent mid-upload reaches them as a reset connection. The rest of an oversized body is therefore
    read and thrown away, up to ``drain_bytes`` more, before the 413; a body larger still is
    answered and the connection closed at once.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, drain_bytes: int = 16 << 20, file_bytes: int | None = None):
        self.app = app
        self.body_bytes = max_bytes
        self.drain_bytes = drain_bytes
        # an upload to OpenAI's Files API (gateway/openai/files.py) may be larger: its file's cap
        # and the multipart form around it
        self.file_bytes = max(max_bytes, (file_bytes or 0) + 64 * 1024)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.file_bytes if scope.get("path") == "/v1/files" else self.body_bytes
        await self._bounded(scope, receive, send, limit)

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > limit
                except ValueError:
                    too_big = False  # the server rejects a broken Content-Length itself
                if too_big:
                    if int(value) <= limit + self.drain_bytes:
                        await self._drain(receive, 0, limit)
                    await self._refuse(send, scope, limit)
                    return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                if message.get("more_body", False):
                    await self._drain(receive, size, limit)
                await self._refuse(send, scope, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: disconnect notices, as usual

        await self.app(scope, replay, send)

    async def _drain(self, receive: Receive, size: int, limit: int) -> None:
        """Read and drop the rest of the body, until it ends or passes the drain allowance."""
        while size <= limit + self.drain_bytes:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            size += len(message.get("body", b""))

    async def _refuse(self, send: Send, scope: Scope, limit: int) -> None:
        exc = BodyTooLarge(f"the request body is larger than the limit of {limit} bytes")
        await send_error(send, exc, scope, close=True)


def apply_caps(request: JobRequest, settings: GatewaySettings) -> JobRequest:
    """Check the operator's caps; returns the request with unset fields fitted under them."""
    s = settings
    if len(request.messages) > s.max_messages:
        raise LimitExceeded(
            f"messages has {len(request.messages)} entries, above the limit of {s.max_messages}", field="messages"
        )
    given = request.model_fields_set
    for name, cap in (("max_tokens", s.max_tokens_cap), ("max_iterations", s.max_iterations_cap)):
        value = getattr(request, name)
        if value > cap:
            if name in given:
                raise LimitExceeded(f"{name} {value} is above the limit of {cap}", field=name)
            setattr(request, name, cap)
    for name, limit in (("timeout_s", s.timeout_cap_s), ("action_timeout_s", s.action_timeout_cap_s)):
        asked = getattr(request, name)
        if asked is not None and asked > limit:
            raise LimitExceeded(f"{name} {asked:g} is above the limit of {limit:g}", field=name)
    return request
