"""Response objects and output items in the shapes of openai.types.responses (Response,
ResponseOutputMessage, ResponseFunctionToolCall, ResponseUsage), built from a stored response and
its job."""

from __future__ import annotations

import json
from typing import Any

from gateway.openai.responses.store import StoredResponse

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


def call_item(call: dict[str, Any], status: str, arguments: str | None = None) -> dict[str, Any]:
    fn = call["function"]
    return {
        "type": "function_call",
        "id": "fc_" + call["id"].removeprefix("call_"),
        "call_id": call["id"],
        "name": fn["name"],
        "arguments": json.dumps(fn.get("arguments") or {}, ensure_ascii=False) if arguments is None else arguments,
        "status": status,
    }


def output_of(job_id: str, final: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items of a final event's data (or a JobResult dumped as JSON)."""
    out = []
    if final.get("content"):
        out.append(message_item(job_id, final["content"], "completed"))
    out += [call_item(c, "completed") for c in final.get("tool_calls") or ()]
    return out


def usage_of(final: dict[str, Any]) -> dict[str, Any]:
    u = final.get("usage") or {}
    inp, outp = int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": int(u.get("cached_prompt_tokens", 0)), "cache_write_tokens": 0},
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


def error_of(data: dict[str, Any]) -> dict[str, Any]:
    """A Response's error from a job's error event data (or JobResult.error)."""
    code = str(data.get("code", "internal"))
    return {
        "code": "invalid_prompt" if code == "context_length_exceeded" else "server_error",
        "message": str(data.get("message", "the job failed")),
    }


def from_job(stored: StoredResponse, rec: dict[str, str]) -> dict[str, Any]:
    """The response as its job's record stands now."""
    result = json.loads(rec["result"]) if rec.get("result") else None
    status = status_of(rec.get("status", "queued"), result.get("finish_reason") if result else None)
    if result is None:
        return response_object(stored, status)
    finished = int(rec["finished_ms"]) // 1000 if rec.get("finished_ms") else None
    return response_object(
        stored,
        status,
        output=output_of(stored.job_id, result) if status in ("completed", "incomplete") else [],
        usage=usage_of(result),
        error=error_of(result["error"]) if result.get("error") else None,
        completed_at=finished if status == "completed" else None,
    )
