"""A batch line's answer in OpenAI's output-file shape:
``{"id": "batch_req_…", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``.

A line whose job ended ``final`` goes to the output file with the body its endpoint would have
answered (a chat completion, a response). A job that failed or was cancelled goes to the error
file with the error its endpoint would have answered (status and body). A line that never ran
(the window passed, the batch was cancelled, its job expired) goes to the error file with
``response`` null and ``error`` its code: ``batch_expired``, ``batch_cancelled``.
"""

from __future__ import annotations

import secrets
from typing import Any

from gateway.openai.chat.shapes import completion
from gateway.openai.errors import body as error_body
from gateway.openai.errors import job_failure
from gateway.openai.responses.shapes import from_job
from gateway.openai.responses.store import StoredResponse
from store.records import JobRecord
from toolq.wire.payloads import CancelledData, ErrorData, FinalData
from toolq.wire.protocol import JobStatus

__all__ = ["answer_of", "refused", "unanswered"]


def _line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": "batch_req_" + secrets.token_hex(12), "custom_id": custom_id, "response": response, "error": error}


def answer_of(endpoint: str, custom_id: str, line_body: dict[str, Any], rec: JobRecord) -> tuple[dict[str, Any], bool]:
    """The line's answer from its ended job, and whether it goes to the output file."""
    result = rec.result
    created = rec.created_ms // 1000
    if rec.status == JobStatus.succeeded and result is not None:
        if endpoint == "/v1/chat/completions":
            final = FinalData(
                content=result.content,
                finish_reason=result.finish_reason,
                iterations=result.iterations,
                usage=result.usage,
                tool_calls=result.tool_calls,
            )
            answer = completion("chatcmpl-" + rec.job_id, rec.model, created, final)
        else:
            request = {k: v for k, v in line_body.items() if k != "input"}
            stored = StoredResponse("resp_" + rec.job_id, rec.job_id, rec.model, created, request, 0)
            answer = from_job(stored, rec)
        return _line(custom_id, {"status_code": 200, "request_id": rec.job_id, "body": answer}, None), True
    if result is not None and result.error is not None:
        err = job_failure(ErrorData(code=str(result.error.code.value), message=result.error.message))
    else:
        err = job_failure(CancelledData(reason="cancelled"))
    shaped = error_body(err.status, err.message, param=None, code=err.code)
    return _line(custom_id, {"status_code": err.status, "request_id": rec.job_id, "body": shaped}, None), False


def unanswered(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """The error line of a line that never ran (``batch_expired``, ``batch_cancelled``, ...)."""
    return _line(custom_id, None, {"code": code, "message": message})


def refused(custom_id: str, status: int, message: str, code: str | None) -> dict[str, Any]:
    """The error line of a line its endpoint refused when it was fed (its model gone, say)."""
    shaped = error_body(status, message, param=None, code=code)
    return _line(custom_id, {"status_code": status, "request_id": None, "body": shaped}, None)
