"""What the two endpoint packages (``chat/`` and ``responses/``) share: the ``toolq`` extension
field, text parts, the job a request becomes, the answer format, the arguments in pieces, the
JSON of a stream event, and the headers and error table of their routes.

What of a job's token stream a caller sees is shared too, in modules of its own:
``visible_text.py`` (answer text) and ``streamed_calls.py`` (calls as they are written).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.openai.errors import OpenAIError, describe_validation
from toolq.wire.protocol import JobRequest, Webhook

JOB_HEADER = "X-Toolq-Job-Id"  # the toolq job behind the answer: its events are at /v1/jobs/{id}/events
CLIENT_CLOSED = 499  # what the access log shows for a caller that left before the answer
ARGUMENT_PIECE = 24  # characters of a checked call's arguments per chunk or delta event


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of a route's errors, each in OpenAI's shape."""
    return {code: {"description": "an error in OpenAI's shape"} for code in codes}


def sse_json(obj: Any) -> str:
    """One stream event's data, compact, as OpenAI sends it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def argument_pieces(arguments: str) -> list[str]:
    """A checked call's arguments string in the pieces a stream sends it in."""
    return [arguments[at : at + ARGUMENT_PIECE] for at in range(0, len(arguments), ARGUMENT_PIECE)]


class ToolqOptions(BaseModel):
    """The ``toolq`` extension field."""

    model_config = ConfigDict(extra="forbid")

    server_tools: list[str] = Field(default_factory=list, description="served tools the worker runs in the full loop")
    max_iterations: int | None = Field(default=None, ge=1, le=100)
    timeout_s: float | None = Field(default=None, gt=0, le=86400)
    webhook: Webhook | None = Field(default=None, description="signed callbacks of the job's end (README: Webhooks)")


def text_of(content: Any, where: str = "content") -> str | None:
    """A message's content as one string: a string, or a list of text parts (joined by newlines,
    as llama.cpp's server joins them). Other parts (images, audio, files) are refused."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError("must be a string or a list of text parts")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("text", "input_text", "output_text") or not isinstance(part.get("text"), str):
            raise ValueError(
                f"{where}[{i}]: only text parts ({{'type': 'text', 'text': ...}}) are supported, not {kind!r}"
            )
        texts.append(part["text"])
    return "\n".join(texts)


def answer_format(
    kind: str, schema: dict[str, Any] | None, name: str | None, *, missing: OpenAIError
) -> dict[str, Any] | None:
    """The job's ``response_format`` from an endpoint's answer format (``missing``: the error of a
    json_schema format without its schema, in that endpoint's words)."""
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if schema is None:
        raise missing
    return {"type": "json_schema", "json_schema": schema, "name": name}


def to_job(
    messages: list[dict[str, Any]],
    ext: ToolqOptions | None,
    *,
    metadata: dict[str, str] | None,
    user: str | None,
    **fields: Any,
) -> JobRequest:
    """The JobRequest of an OpenAI request: the caller's own tools end the job with their calls
    (``on_client_tool="end"``), the extension's served tools run in the worker's loop, the
    ``user`` goes into the metadata, and a field left None takes the job's default. A protocol
    rule it breaks is a 400 naming the field."""
    ext = ext or ToolqOptions()
    fields["tools"] = [*fields.get("tools", ()), *ext.server_tools]
    fields |= {"max_iterations": ext.max_iterations, "timeout_s": ext.timeout_s, "webhook": ext.webhook}
    body = {k: v for k, v in fields.items() if v is not None}
    body |= {"on_client_tool": "end", "metadata": {**(metadata or {}), **({"user": user} if user else {})}}
    try:
        return JobRequest.model_validate({"messages": messages, **body})
    except ValidationError as e:
        message, param = describe_validation([dict(err) for err in e.errors()])
        raise OpenAIError(400, message, param=param) from None
