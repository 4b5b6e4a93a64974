"""The Chat Completions request, as OpenAI documents it, and its translation into a toolq job.

Every field toolq honours is declared here. What happens to each of OpenAI's other documented
fields (a hint dropped, a value that asks for nothing accepted, anything else a 400 naming it) is
in the table of gateway/openai/fields.py, applied before validation; an undocumented field is
refused with a 400 that names it (``extra="forbid"``), so nothing a caller asks for is silently
dropped.

toolq's own extension rides in one namespaced field, ``toolq`` (with the openai SDK:
``extra_body={"toolq": {...}}``): ``server_tools`` names tools the fleet serves (registry, tool
services, MCP), which the worker runs itself in the full loop; ``max_iterations`` and
``timeout_s`` are the job's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.openai import fields
from gateway.openai.errors import OpenAIError, describe_validation
from toolq.limits import MAX_STOP
from toolq.protocol import FunctionSpec, FunctionTool, JobRequest, NamedToolChoice, Webhook


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class ChatFunctionCall(_Strict):
    name: str
    arguments: str = Field(description="the arguments as a JSON string, as the model wrote them")


class ChatToolCall(_Strict):
    index: int | None = None  # a streamed delta's position, which the SDK's stream helper keeps on the call
    id: str
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return text_of(v)


class ChatTool(_Strict):
    type: Literal["function"]
    function: FunctionSpec


class JSONSchemaFormat(_Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None  # toolq always constrains the answer with a grammar


class ResponseFormatParam(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None  # padding against length side channels; toolq sends none


class ToolqOptions(_Strict):
    """The ``toolq`` extension field."""

    server_tools: list[str] = Field(default_factory=list, description="served tools the worker runs in the full loop")
    max_iterations: int | None = Field(default=None, ge=1, le=100)
    timeout_s: float | None = Field(default=None, gt=0, le=86400)
    webhook: Webhook | None = Field(default=None, description="signed callbacks of the job's end (README: Webhooks)")


class ChatCompletionRequest(_Strict):
    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    stop: str | list[str] | None = None
    response_format: ResponseFormatParam | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    metadata: dict[str, str] | None = None
    toolq: ToolqOptions | None = None

    @model_validator(mode="before")
    @classmethod
    def _screen(cls, body: Any) -> Any:
        return fields.screen(fields.CHAT, body)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: Any) -> Any:
        if isinstance(v, list) and len(v) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences")
        return v

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


def to_message(m: ChatMessage) -> dict[str, Any]:
    """One OpenAI message as a toolq Message (developer is system; arguments strings are decoded
    by toolq's FunctionCall)."""
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [c.model_dump(exclude={"index"}) for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None and m.role == "tool":
        out["name"] = m.name
    if m.role == "assistant" and m.content is None and m.refusal:
        out["content"] = m.refusal
    return out


def answer_format(rf: ResponseFormatParam | None) -> dict[str, Any] | None:
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        return {"type": "json_object"}
    if rf.json_schema is None or rf.json_schema.schema_ is None:
        raise OpenAIError(400, "response_format json_schema needs json_schema.schema", param="response_format")
    return {"type": "json_schema", "json_schema": rf.json_schema.schema_, "name": rf.json_schema.name}


def job_request(messages: list[dict[str, Any]], fields: dict[str, Any]) -> JobRequest:
    """Build the JobRequest; a protocol rule it breaks is a 400 naming the field."""
    try:
        return JobRequest.model_validate({"messages": messages, **fields})
    except ValidationError as e:
        message, param = describe_validation([dict(err) for err in e.errors()])
        raise OpenAIError(400, message, param=param) from None


def to_job(req: ChatCompletionRequest) -> JobRequest:
    """The toolq job for a Chat Completions request: the caller's tools end the job with
    finish_reason tool_calls (``on_client_tool="end"``), served tools named in the extension run
    in the worker's loop."""
    ext = req.toolq or ToolqOptions()
    tools: list[Any] = [FunctionTool(function=t.function, execution="client") for t in req.tools or ()]
    tools += ext.server_tools
    fields: dict[str, Any] = {
        "model": req.model,
        "tools": tools,
        "tool_choice": req.tool_choice or "auto",
        "on_client_tool": "end",
        "stream_tokens": bool(req.stream),
        "stop": req.stops(),
        "response_format": answer_format(req.response_format),
        "metadata": {**(req.metadata or {}), **({"user": req.user} if req.user else {})},
    }
    optional = {
        "parallel_tool_calls": req.parallel_tool_calls,
        "max_tokens": req.max_completion_tokens or req.max_tokens,
        "temperature": req.temperature,
        "seed": req.seed,
        "max_iterations": ext.max_iterations,
        "timeout_s": ext.timeout_s,
        "webhook": ext.webhook,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    return job_request([to_message(m) for m in req.messages], fields)
