"""One error shape for every failure: ``{"error": {"code", "message", "field"?, "details"?}}``.

The message names the problem and the field, so a caller can fix the request from it alone.
Anything unexpected becomes a logged 500 with no internals in the body; Redis being unreachable is
a 503 (retry later), never a crash, and so is Redis refusing a write because it is full
(``maxmemory`` with ``noeviction``, the policy a queue needs: docker-compose.yml): the write was
refused whole (a script that has not written yet is stopped at its first write), so nothing the
gateway acknowledged is lost, and the 503 says the store is full.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import Scope, Send

from gateway.openai.errors import PREFIXES as OPENAI_PREFIXES
from gateway.openai.errors import body as openai_body
from store.durability import NotReplicated
from store.errors import OutOfMemoryError, RedisError
from store.threads import ThreadLimitReached
from toolq.errors import LimitExceeded, NotReplicatedError, ToolqError

log = structlog.get_logger("toolq.gateway")


def _where(loc: Sequence[Any]) -> str:
    """('body', 'messages', 0, 'content') -> 'messages[0].content'; the transport part is dropped."""
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif not str(p).startswith(("function-", "tagged-union[", "literal[", "union[")):
            out += ("." if out else "") + str(p)
    return out or (str(loc[0]) if loc else "request")


def _describe(err: dict[str, Any]) -> str:
    where = _where(err.get("loc", ()))
    kind, msg = err.get("type", ""), err.get("msg", "invalid")
    if kind == "json_invalid":
        why = (err.get("ctx") or {}).get("error", "")
        return f"the body is not valid JSON ({why})" if why else "the body is not valid JSON"
    if kind == "model_attributes_type" and where in ("body", "request"):
        return "the body must be a JSON object (Content-Type: application/json)"
    if kind == "missing" and where == "body":
        return "the body is missing: send a JSON object (Content-Type: application/json)"
    return f"{where}: {msg}"


def _first_field(errors: list[dict[str, Any]]) -> str | None:
    for e in errors:
        w = _where(e.get("loc", ()))
        if w not in ("body", "request"):
            return w
    return None


def install(app: FastAPI) -> None:
    @app.exception_handler(ToolqError)
    async def _toolq(request: Request, exc: ToolqError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        messages = list(dict.fromkeys(_describe(e) for e in errors))  # unique, in order
        details = [
            {"field": _where(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")} for e in errors
        ]
        is_json = any(e.get("type") == "json_invalid" for e in errors)
        body = {
            "error": {
                "code": "invalid_json" if is_json else "invalid_request",
                "message": "; ".join(messages[:10]),
                "details": details[:50],
            }
        }
        field = _first_field(errors)
        if field:
            body["error"]["field"] = field
        return JSONResponse(body, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(
            {"error": {"code": code, "message": str(exc.detail)}},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(NotReplicated)
    async def _not_replicated(request: Request, exc: NotReplicated) -> JSONResponse:
        # not a 201 or 200: the write is on the primary only, and a failover now would drop it
        log.warning("write not replicated in time", job_id=exc.job_id, acked=exc.acked, wanted=exc.wanted)
        return await _toolq(request, not_replicated(exc))

    @app.exception_handler(ThreadLimitReached)
    async def _thread_limit(request: Request, exc: ThreadLimitReached) -> JSONResponse:
        return await _toolq(request, LimitExceeded(str(exc), field=exc.field))

    @app.exception_handler(RedisError)
    async def _redis(request: Request, exc: RedisError) -> JSONResponse:
        if is_out_of_memory(exc):
            log.warning("redis refused a write: out of memory", error=str(exc), path=request.url.path)
            body = {
                "error": {
                    "code": "store_full",
                    "message": "the job store (Redis) is full (maxmemory reached) and refused the write; "
                    "nothing was accepted: retry later",
                }
            }
            return JSONResponse(body, status_code=503, headers={"Retry-After": str(OOM_RETRY_AFTER_S)})
        log.warning("redis unavailable", error=str(exc), path=request.url.path)
        body = {"error": {"code": "unavailable", "message": "the job store (Redis) is unreachable; retry"}}
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", path=request.url.path)
        return JSONResponse({"error": {"code": "internal", "message": "internal error"}}, status_code=500)


async def send_error(send: Send, exc: ToolqError, scope: Scope, *, close: bool = False) -> None:
    """Answer with ``exc``'s error body straight from an ASGI middleware, before any route runs:
    in OpenAI's shape on its paths, as the app's handlers answer there (gateway/openai/errors.py).
    ``close``: the request's body was not read to its end, so the connection cannot be reused."""
    if str(scope.get("path", "")).startswith(OPENAI_PREFIXES):
        status = 400 if exc.status == 422 else exc.status
        shaped = openai_body(status, exc.message, param=exc.field, code=exc.code)
    else:
        status, shaped = exc.status, exc.body()
    payload = json.dumps(shaped).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in exc.headers.items()]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


OOM_RETRY_AFTER_S = 5  # memory frees as jobs expire and workers drain queues: not at once


def is_out_of_memory(exc: BaseException) -> bool:
    """Redis refused a write for ``maxmemory``: redis-py's OutOfMemoryError, or the same ``OOM``
    reply wrapped in a script's error (EVALSHA reports it as the script's failure)."""
    return isinstance(exc, OutOfMemoryError) or "OOM command not allowed" in str(exc)


def not_replicated(exc: NotReplicated) -> NotReplicatedError:
    """The 503 of a write WAIT found short (store/durability.py)."""
    return NotReplicatedError(
        f"{exc}; it may run, or be lost if the primary fails now: retry with the same Idempotency-Key "
        "(the same job comes back) or look it up by its id",
        field=None,
    )
