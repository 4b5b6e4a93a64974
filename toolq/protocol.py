"""The wire contract between submitters, the gateway and workers.

Everything that crosses Redis or HTTP is one of these models, serialized as JSON (events,
results, job records) or msgpack (arq payloads); never pickle. Change a shape only on purpose
and bump PROTOCOL_VERSION with it.
"""

from __future__ import annotations

import json
import secrets
import time
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PROTOCOL_VERSION = 1


def new_job_id() -> str:
    return "job_" + secrets.token_hex(10)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(6)


def now_ms() -> int:
    return int(time.time() * 1000)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ---------------------------------------------------------------- messages and tool calls


class FunctionCall(_Model):
    name: str = Field(min_length=1, max_length=128)
    # Arguments travel as an object. OpenAI clients send a JSON string: accept and decode it.
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments", mode="before")
    @classmethod
    def _decode_string_arguments(cls, v: Any) -> Any:
        if v is None:
            return {}
        if isinstance(v, str):
            try:
                v = json.loads(v) if v.strip() else {}
            except json.JSONDecodeError as e:
                raise ValueError(f"arguments is a string but not valid JSON: {e.msg}") from None
        return v


class ToolCall(_Model):
    id: str = Field(default_factory=new_call_id, min_length=1, max_length=128)
    type: Literal["function"] = "function"
    function: FunctionCall

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def arguments(self) -> dict[str, Any]:
        return self.function.arguments


Role = Literal["system", "user", "assistant", "tool"]


class Message(_Model):
    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _check_shape(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages may carry tool_calls, not role {self.role!r}")
        if self.role in ("system", "user") and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "tool" and self.content is None:
            raise ValueError("a tool message needs content (the tool's result)")
        return self


# ---------------------------------------------------------------- the job request


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: dict[str, str]

    @field_validator("function")
    @classmethod
    def _needs_name(cls, v: dict[str, str]) -> dict[str, str]:
        if not v.get("name"):
            raise ValueError('a named tool choice is {"type": "function", "function": {"name": ...}}')
        return v

    @property
    def name(self) -> str:
        return self.function["name"]


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class JobRequest(_Model):
    version: int = PROTOCOL_VERSION
    messages: list[Message] = Field(min_length=1)
    tools: list[str] | None = None  # names from the worker registry; None means all
    tool_choice: ToolChoice = "auto"
    # False: at most one call per turn (the grammar ends after it). Small models that repeat a
    # call until max_tokens are much faster with it.
    parallel_tool_calls: bool = True
    model: str | None = None  # None: the only model served, if exactly one is
    max_iterations: int = Field(default=5, ge=1, le=100)
    max_tokens: int = Field(default=512, ge=1, le=32768)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    stream_tokens: bool = False
    timeout_s: float | None = Field(default=None, gt=0, le=86400)
    metadata: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)

    @field_validator("version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != PROTOCOL_VERSION:
            raise ValueError(f"protocol version {v} is not supported (this service speaks {PROTOCOL_VERSION})")
        return v

    @model_validator(mode="after")
    def _check(self) -> JobRequest:
        if isinstance(self.tool_choice, NamedToolChoice) and self.tools is not None:
            if self.tool_choice.name not in self.tools:
                raise ValueError(f"tool_choice names {self.tool_choice.name!r}, which is not in tools")
        if self.tool_choice == "required" and self.tools == []:
            raise ValueError("tool_choice 'required' needs at least one tool")
        return self

    def forced_tool(self) -> str | None:
        return self.tool_choice.name if isinstance(self.tool_choice, NamedToolChoice) else None


# ---------------------------------------------------------------- events


class EventType(str, Enum):
    queued = "queued"
    started = "started"
    token = "token"
    tool_call = "tool_call"
    tool_result = "tool_result"
    final = "final"
    error = "error"
    cancelled = "cancelled"


TERMINAL_EVENTS = frozenset({EventType.final, EventType.error, EventType.cancelled})


class Event(_Model):
    job_id: str
    seq: int = Field(ge=1)
    type: EventType
    ts: int  # unix milliseconds
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENTS


# ---------------------------------------------------------------- results and errors


class ErrorCode(str, Enum):
    invalid_request = "invalid_request"
    unknown_tool = "unknown_tool"
    unknown_model = "unknown_model"
    context_length_exceeded = "context_length_exceeded"
    timeout = "timeout"
    engine_error = "engine_error"
    worker_lost = "worker_lost"
    internal = "internal"


class JobStatus(str, Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


FinishReason = Literal["stop", "max_iterations", "length", "cancelled", "timeout", "error"]


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_prompt_tokens += other.cached_prompt_tokens


class Timings(_Model):
    queue_ms: float = 0.0
    generate_ms: float = 0.0
    tools_ms: float = 0.0
    total_ms: float = 0.0


class ErrorInfo(_Model):
    code: ErrorCode
    message: str


class JobResult(_Model):
    job_id: str
    status: JobStatus
    content: str | None = None
    messages: list[Message] = Field(default_factory=list)
    iterations: int = 0
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    timings: Timings = Field(default_factory=Timings)
    error: ErrorInfo | None = None
    attempt: int = 1
