"""Errors of the OpenAI-compatible endpoints, in OpenAI's shape:
``{"error": {"message", "type", "param", "code"}}``.

The official SDKs pick their exception class from the status (400 BadRequestError, 401
AuthenticationError, 404 NotFoundError, 429 RateLimitError...) and read ``message`` from this
body. The app's own handlers (gateway/errors.py) answer in toolq's shape; ``install`` wraps them
so that a request to an OpenAI path gets the same status and message in OpenAI's shape, whatever
raised it: a route, the auth dependency, request validation, Redis.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.responses import Response

from toolq.errors import ToolqError
from toolq.wire.payloads import ErrorData, EventData

# Paths served in OpenAI's shapes (GET /v1/models is toolq's own catalog too, so it keeps toolq's errors).
PREFIXES = ("/v1/chat/", "/v1/responses", "/v1/conversations", "/v1/files", "/v1/batches")

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
    503: "server_error",
}
# toolq's error codes where OpenAI has its own word for the same thing
_CODES = {"unauthorized": "invalid_api_key", "unknown_model": "model_not_found", "queue_full": "rate_limit_exceeded"}


class OpenAIError(ToolqError):
    """An error raised by the OpenAI-compatible routes: status, message, param and code as OpenAI
    would answer them."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None, **kw: Any):
        super().__init__(message, field=param, code=code or "invalid_request", **kw)
        self.status = status


def body(status: int, message: str, *, param: str | None, code: str | None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": param,
            "code": _CODES.get(code, code) if code else None,
        }
    }


def is_openai(request: Request) -> bool:
    return request.url.path.startswith(PREFIXES)


def _field(loc: Any) -> str | None:
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif not str(p).startswith(("function-", "tagged-union[", "literal[", "union[", "json-or-python[")):
            out += ("." if out else "") + str(p)
    return out or None


def describe_validation(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """(message, param) for request validation errors: an unknown field is named the way OpenAI
    names it, anything else as ``param: problem``."""
    extra = [e for e in errors if e.get("type") == "extra_forbidden"]
    if extra:
        where = _field(extra[0].get("loc", ()))
        return f"Unrecognized request argument supplied: {where}", where
    first = errors[0] if errors else {}
    where = _field(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return "We could not parse the JSON body of your request: it is not valid JSON.", None
    if first.get("type") == "missing" and where is None:
        return "The request body is missing: send a JSON object.", None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return (f"{where}: {msg}" if where else msg), where


def install(app: FastAPI) -> None:
    """Wrap the app's exception handlers (gateway/errors.py installs them first)."""
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = dict(app.exception_handlers)

    def wrap(
        original: Callable[[Request, Exception], Awaitable[Response]],
    ) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def handler(request: Request, exc: Exception) -> Response:
            if not is_openai(request):
                return await original(request, exc)
            if isinstance(exc, RequestValidationError):
                message, param = describe_validation(list(exc.errors()))
                return JSONResponse(body(400, message, param=param, code=None), status_code=400)
            if isinstance(exc, ToolqError):
                status = 400 if exc.status == 422 else exc.status
                return JSONResponse(
                    body(status, exc.message, param=exc.field, code=exc.code), status_code=status, headers=exc.headers
                )
            answer = await original(request, exc)  # HTTP errors, Redis down, the unexpected
            err = json.loads(bytes(answer.body)).get("error", {}) if isinstance(answer, JSONResponse) else {}
            return JSONResponse(
                body(answer.status_code, str(err.get("message", "error")), param=None, code=err.get("code")),
                status_code=answer.status_code,
                headers={k: v for k, v in answer.headers.items() if k.lower() == "retry-after"},
            )

        return handler

    for key, original in handlers.items():
        app.add_exception_handler(key, wrap(original))


# How a job that ended without an answer is told to an OpenAI client: (status, code).
_JOB_ERRORS = {
    "context_length_exceeded": (400, "context_length_exceeded"),
    "invalid_request": (400, "invalid_request"),
    "unknown_tool": (400, "unknown_tool"),
    "unknown_model": (404, "model_not_found"),
    "timeout": (504, "timeout"),
    "action_timeout": (504, "timeout"),
    "tool_service_unavailable": (503, "tool_service_unavailable"),
}


def job_failure(data: EventData) -> OpenAIError:
    """The error for a job's ``error`` or ``cancelled`` event."""
    if not isinstance(data, ErrorData):
        return OpenAIError(409, "the request's job was cancelled before it answered", code="cancelled")
    status, oa_code = _JOB_ERRORS.get(data.code, (500, data.code))
    return OpenAIError(status, data.message or "the job failed", code=oa_code)
