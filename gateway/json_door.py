"""A body that nests too deep is refused at the door, before anything parses it.

Python's ``json`` recurses once per level, pydantic refuses past about 200 levels, and an error that
quotes a deep input recurses again; a job nested deeper than a worker can read back would be
accepted and never end (toolq/wire/nesting.py). So every body is measured here, after
gateway/limits.py has bounded its size: a body nested past ``TOOLQ_MAX_JSON_DEPTH`` gets a 422
``too_deep`` naming the field, the depth and the limit. The measure is linear and runs in C; a
large body is measured in the gateway's check process (gateway/check_process.py), off the loop.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.check_process import in_check_process
from gateway.errors import send_error
from toolq.errors import InvalidRequest
from toolq.wire.nesting import TooDeep, check_text_depth, max_json_depth

__all__ = ["JsonDepthLimit"]

_ON_LOOP_BYTES = 64 * 1024  # smaller bodies are measured in place: well under a millisecond


class JsonDepthLimit:
    """Pure ASGI middleware, inside BodySizeLimit (which has read the body and replays it whole)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        first = await receive()
        body = first.get("body", b"") if first["type"] == "http.request" else b""
        try:
            if len(body) > _ON_LOOP_BYTES:
                await in_check_process(check_text_depth, body, max_json_depth())
            else:
                check_text_depth(body)
        except TooDeep as e:
            await send_error(
                send, InvalidRequest(str(e), field=e.field, code="too_deep"), scope, close=first.get("more_body", False)
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.app(scope, replay, send)
