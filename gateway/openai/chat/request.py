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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.openai import fields, shared
from gateway.openai.errors import OpenAIError
from gateway.openai.shared import ToolqOptions, text_of
from toolq.wire.limits import MAX_STOP
from toolq.wire.protocol import FunctionSpec, FunctionTool, JobRequest, NamedToolChoice


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatFunctionCall(_Strict):
    name: str
    arguments: str = Field(description="the arguments as a JSON string, as the model wrote them")


class ChatToolCall(_Strict):
    index: int | None = None  # a streamed delta's position, which the SDK's stream helper keeps on the call
    id: str
    type: Literal["function"] = "function"
    function: ChatFunctionCall
    # our own extension on the calls we answer (the call's effect key: gateway/openai/chat/shapes.py),
    # which a caller replaying our assistant message sends back; read and dropped
    toolq: dict[str, Any] | None = None


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
        out["tool_calls"] = [c.model_dump(exclude={"index", "toolq"}) for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None and m.role == "tool":
        out["name"] = m.name
    if m.role == "assistant" and m.content is None and m.refusal:
        out["content"] = m.refusal
    return out


def answer_format(rf: ResponseFormatParam | None) -> dict[str, Any] | None:
    if rf is None:
        return None
    js = rf.json_schema
    missing = OpenAIError(400, "response_format json_schema needs json_schema.schema", param="response_format")
    return shared.answer_format(rf.type, js.schema_ if js else None, js.name if js else None, missing=missing)


def to_job(req: ChatCompletionRequest) -> JobRequest:
    """The toolq job for a Chat Completions request (gateway/openai/shared.py: to_job)."""
    return shared.to_job(
        [to_message(m) for m in req.messages],
        req.toolq,
        metadata=req.metadata,
        user=req.user,
        model=req.model,
        tools=[FunctionTool(function=t.function, execution="client") for t in req.tools or ()],
        tool_choice=req.tool_choice or "auto",
        stream_tokens=bool(req.stream),
        stop=req.stops(),
        response_format=answer_format(req.response_format),
        parallel_tool_calls=req.parallel_tool_calls,
        max_tokens=req.max_completion_tokens or req.max_tokens,
        temperature=req.temperature,
        seed=req.seed,
    )
