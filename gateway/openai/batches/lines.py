"""A batch's input file, read line by line into the jobs its lines become, or into OpenAI's errors.

Each line is ``{"custom_id", "method": "POST", "url", "body"}``; its body is what the endpoint it
names would take, checked by the endpoint's own request model and turned into a toolq job by the
endpoint's own conversion (gateway/openai/chat/request.py, gateway/openai/responses/request.py),
so a line is refused for exactly what a request would be. A line may not offer a client-run tool:
nobody waits on a batch to run one. Its served tools (``toolq.server_tools``: the worker's
registry, tool services, MCP) run inside the line's job.

Every bad line is reported, each with its line number, as OpenAI reports a batch that failed
validation (``errors.data``: code, message, param, line), up to ``MAX_ERRORS``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.openai.chat.request import ChatCompletionRequest
from gateway.openai.chat.request import to_job as chat_job
from gateway.openai.errors import OpenAIError, describe_validation
from gateway.openai.responses.request import ResponsesRequest
from gateway.openai.responses.request import to_job as responses_job
from toolq.wire.nesting import TooDeep, check_text_depth
from toolq.wire.protocol import JobRequest

__all__ = ["ENDPOINTS", "MAX_ERRORS", "Line", "line_job", "read_lines", "stored_lines"]

ENDPOINTS = ("/v1/chat/completions", "/v1/responses")
MAX_ERRORS = 1000


@dataclass(frozen=True)
class Line:
    index: int  # from 0; OpenAI's ``line`` is index + 1
    custom_id: str
    body: dict[str, Any]

    def stored(self) -> str:
        return json.dumps({"custom_id": self.custom_id, "body": self.body}, ensure_ascii=False)

    @classmethod
    def of(cls, index: int, stored: str) -> Line:
        d = json.loads(stored)
        return cls(index, d["custom_id"], d["body"])


def line_job(endpoint: str, body: dict[str, Any]) -> JobRequest:
    """The job of one line's body; OpenAIError (its 400) when the endpoint would refuse it."""
    try:
        if endpoint == "/v1/chat/completions":
            chat = ChatCompletionRequest.model_validate(body)
            if chat.tools:
                raise _client_tools()
            job = chat_job(chat)
        else:
            resp = ResponsesRequest.model_validate(body)
            if resp.tools:
                raise _client_tools()
            if resp.previous_response_id or resp.conversation is not None:
                raise OpenAIError(400, "a batch line stands alone: previous_response_id and conversation are not taken")
            job = responses_job(resp, [])
    except ValidationError as e:
        message, param = describe_validation([dict(err) for err in e.errors()])
        raise OpenAIError(400, message, param=param) from None
    return job.model_copy(update={"stream_tokens": False})


def _client_tools() -> OpenAIError:
    return OpenAIError(
        400,
        "a batch line cannot offer client-run tools (tools): nobody is there to run them; "
        'name served tools in the extension field instead ("toolq": {"server_tools": [...]})',
        param="tools",
        code="client_tools_not_supported",
    )


def read_lines(content: bytes, endpoint: str, max_lines: int) -> tuple[list[Line], list[dict[str, Any]]]:
    """The file's lines, and the errors of the bad ones (none: every line is good)."""
    lines: list[Line] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()

    def bad(number: int, code: str, message: str, param: str | None = None) -> None:
        if len(errors) < MAX_ERRORS:
            errors.append({"code": code, "message": message, "param": param, "line": number})

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        return [], [
            {"code": "invalid_file", "message": f"the file is not UTF-8 ({e.reason})", "param": None, "line": None}
        ]
    raw_lines = text.split("\n")
    while raw_lines and not raw_lines[-1].strip():
        raw_lines.pop()
    if not raw_lines:
        return [], [{"code": "empty_file", "message": "the file holds no request lines", "param": None, "line": None}]
    if len(raw_lines) > max_lines:
        message = f"the file holds {len(raw_lines)} lines, above the limit of {max_lines} (TOOLQ_BATCH_MAX_LINES)"
        return [], [{"code": "too_many_lines", "message": message, "param": None, "line": None}]
    for number, raw in enumerate(raw_lines, start=1):
        try:
            check_text_depth(raw)
            d = json.loads(raw)
        except (TooDeep, ValueError) as e:
            bad(number, "invalid_json_line", f"line {number} is not a JSON object: {e}")
            continue
        if not isinstance(d, dict):
            bad(number, "invalid_json_line", f"line {number} is not a JSON object")
            continue
        custom_id = d.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id or len(custom_id) > 512:
            bad(number, "missing_custom_id", "custom_id is required: a string of 1 to 512 characters", "custom_id")
            continue
        if custom_id in seen:
            bad(number, "duplicate_custom_id", f"custom_id {custom_id!r} is used by an earlier line", "custom_id")
            continue
        seen.add(custom_id)
        if d.get("method", "POST") != "POST":
            bad(number, "invalid_method", f"method {d.get('method')!r}: only POST is taken", "method")
            continue
        if d.get("url") != endpoint:
            said = f"url {d.get('url')!r}"
            bad(number, "invalid_url", f"{said} is not the batch's endpoint {endpoint}", "url")
            continue
        body = d.get("body")
        if not isinstance(body, dict):
            bad(number, "invalid_request", "body must be a JSON object", "body")
            continue
        try:
            line_job(endpoint, body)
        except OpenAIError as e:
            bad(number, e.code or "invalid_request", e.message, e.field and f"body.{e.field}")
            continue
        lines.append(Line(number - 1, custom_id, body))
    return lines, errors


def stored_lines(content: bytes, endpoint: str, max_lines: int) -> tuple[list[str], list[dict[str, Any]]]:
    """``read_lines`` as the batch files' process hands it back (gateway/check_process.py): each
    good line as the batch stores it, and the errors."""
    lines, errors = read_lines(content, endpoint, max_lines)
    return [line.stored() for line in lines], errors
