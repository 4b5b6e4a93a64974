"""Response objects and output items in the shapes of openai.types.responses (Response,
ResponseOutputMessage, ResponseFunctionToolCall, ResponseUsage), built from a stored response and
its job."""

from __future__ import annotations

import json
from typing import Any

from gateway.openai.responses.store import StoredResponse
from store.records import JobRecord
from toolq.wire.payloads import ErrorData, FinalData
from toolq.wire.protocol import ErrorCode, ErrorInfo, JobResult, ToolCall

# job status -> Response status (a succeeded job may still be "incomplete": see status_of)
STATUS = {
    "queued": "queued",
    "running": "in_progress",
    "requires_action": "in_progress",
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}


def message_item(job_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": "msg_" + job_id.removeprefix("job_"),
        "status": status,
        "role": "assistant",
        "content": [part],
    }


def call_item(call: ToolCall, status: str, arguments: str | None = None) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_" + call.id.removeprefix("call_"),
        "call_id": call.id,
        "name": call.name,
        "arguments": json.dumps(call.arguments or {}, ensure_ascii=False) if arguments is None else arguments,
        "status": status,
    }


def output_of(job_id: str, final: FinalData | JobResult) -> list[dict[str, Any]]:
    """The output items of a final event's data (or of the job's result: the same fields)."""
    out = []
    if final.content:
        out.append(message_item(job_id, final.content, "completed"))
    out += [call_item(c, "completed") for c in final.tool_calls or ()]
    return out


def usage_of(final: FinalData | JobResult) -> dict[str, Any]:
    u = final.usage
    inp, outp = u.prompt_tokens, u.completion_tokens
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": u.cached_prompt_tokens, "cache_write_tokens": 0},
        "output_tokens": outp,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + outp,
    }


def status_of(job_status: str, finish_reason: str | None) -> str:
    if job_status == "succeeded" and finish_reason == "length":
        return "incomplete"
    return STATUS.get(job_status, "in_progress")


def response_object(
    stored: StoredResponse,
    status: str,
    *,
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    completed_at: int | None = None,
) -> dict[str, Any]:
    req = stored.request
    text = req.get("text") or {"format": {"type": "text"}}
    return {
        "id": stored.id,
        "object": "response",
        "created_at": stored.created_at,
        "status": status,
        "background": bool(req.get("background")),
        "completed_at": completed_at,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"),
        "model": stored.model,
        "output": output or [],
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "previous_response_id": req.get("previous_response_id"),
        "conversation": conversation_ref(req.get("conversation")),
        "temperature": req.get("temperature"),
        "text": text,
        "tool_choice": req.get("tool_choice") or "auto",
        "tools": req.get("tools") or [],
        "top_p": None,
        "truncation": "disabled",
        "usage": usage,
        "metadata": req.get("metadata") or {},
        "user": req.get("user"),
        "store": True,
    }


def conversation_ref(given: Any) -> dict[str, str] | None:
    """The request's ``conversation`` (an id or {"id": ...}) as a Response echoes it."""
    if given is None:
        return None
    return {"id": given if isinstance(given, str) else str(given["id"])}


def error_of(error: ErrorData | ErrorInfo) -> dict[str, Any]:
    """A Response's error from a job's error event data (or JobResult.error)."""
    return {
        "code": "invalid_prompt" if error.code == ErrorCode.context_length_exceeded else "server_error",
        "message": error.message or "the job failed",
    }


def from_job(stored: StoredResponse, rec: JobRecord) -> dict[str, Any]:
    """The response as its job's record stands now."""
    result = rec.result
    status = status_of(rec.status.value, result.finish_reason if result else None)
    if result is None:
        return response_object(stored, status)
    finished = rec.finished_ms // 1000 if rec.finished_ms else None
    return response_object(
        stored,
        status,
        output=output_of(stored.job_id, result) if status in ("completed", "incomplete") else [],
        usage=usage_of(result),
        error=error_of(result.error) if result.error else None,
        completed_at=finished if status == "completed" else None,
    )
