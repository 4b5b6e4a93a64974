"""The wire contract between submitters, the gateway and workers.

Everything that crosses Redis or HTTP is one of these models, serialized as JSON (events,
results, job records) or msgpack (arq payloads); never pickle. Change a shape only on purpose
and bump PROTOCOL_VERSION with it.

A leaf of the house: besides pydantic (and jsonschema, where installed) it imports only its sizes
(``toolq/wire/limits.py``) and the tool-definition checks (``toolq/wire/definitions.py``, with their bounds
``toolq/wire/schema_bounds.py`` and ``toolq/wire/patterns.py``), which import nothing else of the house.
"""

from __future__ import annotations

import json
import secrets
import time
from enum import Enum
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from toolq.wire.definitions import check_bounds, check_parameters, check_tool_name, metaschema_error
from toolq.wire.limits import MAX_DESCRIPTION, MAX_SCHEMA_BYTES, MAX_STOP, MAX_TOOLS
from toolq.wire.nesting import check_depth, check_text_depth
from toolq.wire.schema_bounds import SchemaTooLarge, check_request_subschemas

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
            check_text_depth(v, at="arguments")  # before json.loads, which recurses per level
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

# Where a tool call runs: the worker's own registry, a tool service (toolq.ToolService, over Redis),
# the caller (the job pauses until the result is posted), or an MCP server a worker or service holds.
Where = Literal["worker", "service", "client", "mcp"]


STORED = {"stored": True}  # validation context: a request read back from the store (JobRecord.request)


def stored(info: ValidationInfo) -> bool:
    """Whether the value is read back from the store, where only a request this protocol checked
    was written: the costly schema checks (jsonschema's metaschema, about 0.2 ms a subschema, and
    the bounds walk) are not repeated by every worker that reads it."""
    return bool(info.context and info.context.get("stored"))


class FunctionSpec(_Model):
    name: str
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    # None with execution "server": the served tool's own schema applies.
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # OpenAI's hint; toolq always constrains and validates

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_tool_name(v)

    @model_validator(mode="after")
    def _schema(self, info: ValidationInfo) -> FunctionSpec:
        if self.parameters is not None and not stored(info):
            check_parameters(self.name, self.parameters)
        return self


class FunctionTool(_Model):
    """A tool defined in the request, OpenAI's function shape plus where it runs.

    ``execution`` "client" (the default, as in OpenAI's API): the caller runs it; the job pauses
    with ``requires_action`` until the result is posted. "server": a tool the fleet serves under
    this name (worker registry, tool service or MCP); the definition may only add
    ``requires_approval``, and its schema is the served one.
    """

    type: Literal["function"] = "function"
    function: FunctionSpec
    execution: Literal["client", "server"] = "client"
    requires_approval: bool = False

    @property
    def name(self) -> str:
        return self.function.name

    @model_validator(mode="after")
    def _shape(self) -> FunctionTool:
        if self.execution == "server" and self.function.parameters is not None:
            raise ValueError(
                f"tool {self.name!r}: a server tool's parameters come from the tool itself; leave parameters out"
            )
        if self.execution == "client" and self.function.parameters is None:
            self.function.parameters = {"type": "object", "properties": {}}
        return self

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec the model is shown (client tools only)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.function.description,
                "parameters": self.function.parameters or {"type": "object", "properties": {}},
            },
        }


ToolRef = str | FunctionTool


class ResponseFormat(_Model):
    """The shape of the final answer: a JSON object, or JSON matching ``json_schema``.

    The worker constrains the answer round with a grammar built from the schema and validates the
    answer against it (worker/answer_format.py).
    """

    type: Literal["json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None  # with type "json_schema": the JSON Schema of the answer
    name: str | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _schema(self, info: ValidationInfo) -> ResponseFormat:
        if self.type == "json_schema":
            if self.json_schema is None:
                raise ValueError("a json_schema response format needs its schema")
            if stored(info):
                return self
            size = len(json.dumps(self.json_schema, separators=(",", ":"), ensure_ascii=False))
            if size > MAX_SCHEMA_BYTES:
                raise ValueError(f"the response format's schema is {size} bytes of JSON, above {MAX_SCHEMA_BYTES}")
            check_bounds(self.json_schema, "json_schema")
            broken = metaschema_error(self.json_schema)
            if broken is not None:
                raise ValueError(f"the response format's schema is not a valid JSON Schema: {broken[1]}")
        elif self.json_schema is not None:
            raise ValueError("only a json_schema response format takes a schema")
        return self


# ---------------------------------------------------------------- webhooks

# The events a webhook may report: a job's terminal event (final, error, cancelled) and its pauses.
WebhookEvent = Literal["completed", "failed", "cancelled", "requires_action"]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = ("completed", "failed", "cancelled", "requires_action")


class Webhook(_Model):
    """Where a job reports its end and its pauses, signed per Standard Webhooks (README: Webhooks).
    A bare URL string stands for every event. Reusable by any request that names a webhook."""

    url: str = Field(min_length=1, max_length=2048)
    events: list[WebhookEvent] = Field(default_factory=lambda: list(WEBHOOK_EVENTS), min_length=1, max_length=4)

    @model_validator(mode="before")
    @classmethod
    def _bare_url(cls, v: Any) -> Any:
        return {"url": v} if isinstance(v, str) else v

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("a webhook URL is http(s)://host[:port]/path")
        if parts.username is not None or parts.password is not None:
            raise ValueError("a webhook URL carries no credentials (deliveries are signed instead)")
        try:
            parts.port  # noqa: B018  (raises on a port that is not a number in 0..65535)
        except ValueError:
            raise ValueError("a webhook URL's port is a number from 1 to 65535") from None
        return v


def tool_schemas(tools: Any) -> list[Any]:
    """The raw JSON Schemas of a request's tools (their parameters), before validation: in the
    function shape of toolq and Chat Completions, or the flat one of OpenAI's Responses."""
    out: list[Any] = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict):
            continue
        fn = t.get("function")
        holder = fn if isinstance(fn, dict) else t
        if "parameters" in holder:
            out.append(holder["parameters"])
    return out


class JobRequest(_Model):
    version: int = PROTOCOL_VERSION
    messages: list[Message] = Field(min_length=1)
    # Names of served tools (worker registry, tool services, MCP), or function definitions
    # (FunctionTool), mixed; None means every tool the model's workers serve.
    tools: list[ToolRef] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice = "auto"
    # False: at most one call per turn (the grammar ends after it). Small models that repeat a
    # call until max_tokens are much faster with it.
    parallel_tool_calls: bool = True
    model: str | None = None  # None: the only model served, if exactly one is
    max_iterations: int = Field(default=5, ge=1, le=100)
    max_tokens: int = Field(default=512, ge=1, le=32768)
    # The caller's stop sequences, besides the chat template's end of turn and the format's own.
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOP)
    # None: free text. Otherwise the final answer is JSON (json_object) or matches a schema.
    response_format: ResponseFormat | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    stream_tokens: bool = False
    timeout_s: float | None = Field(default=None, gt=0, le=86400)
    # How long a pause (client tools, approvals) may wait for the caller; capped by the operator.
    action_timeout_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    # When the model calls a client tool: "pause" the job until the caller posts the result
    # (requires_action), or "end" it with finish_reason "tool_calls" and the calls in the result,
    # as OpenAI's Chat Completions does (the caller sends a new job with the results).
    on_client_tool: Literal["pause", "end"] = "pause"
    metadata: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    # Within its tenant, a job of a higher priority starts first (9 first); across tenants the fair
    # shares decide (store/fair.py). It orders only the tenant's own waiting jobs.
    priority: int = Field(default=0, ge=0, le=9)
    # Signed callbacks of this job's end and pauses (None: the tenant's default, if the operator set one).
    webhook: Webhook | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_small_enough(cls, v: Any) -> Any:
        """Before any tool is checked one by one: their schemas together are small enough for the
        metaschema check and the grammar build, each linear in what they hold."""
        try:
            check_request_subschemas(tool_schemas(v))
        except SchemaTooLarge as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_shallow(cls, v: Any) -> Any:
        # a worker reads the job back with pydantic, which refuses past about 200 levels
        check_depth(v, at="metadata")
        return v

    @field_validator("version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != PROTOCOL_VERSION:
            raise ValueError(f"protocol version {v} is not supported (this service speaks {PROTOCOL_VERSION})")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: list[str]) -> list[str]:
        for s in v:
            if not 1 <= len(s) <= 256:
                raise ValueError("a stop sequence is 1 to 256 characters long")
        return v

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, v: list[ToolRef] | None) -> list[ToolRef] | None:
        if v is None:
            return v
        seen: set[str] = set()
        for t in v:
            name = t if isinstance(t, str) else t.name
            if isinstance(t, str):
                check_tool_name(t)
            if name in seen:
                raise ValueError(f"tool {name!r} is listed twice")
            seen.add(name)
        return v

    @model_validator(mode="after")
    def _check(self) -> JobRequest:
        if isinstance(self.tool_choice, NamedToolChoice) and self.tools is not None:
            if self.tool_choice.name not in self.tool_names():
                raise ValueError(f"tool_choice names {self.tool_choice.name!r}, which is not in tools")
        if self.tool_choice == "required" and self.tools == []:
            raise ValueError("tool_choice 'required' needs at least one tool")
        return self

    def forced_tool(self) -> str | None:
        return self.tool_choice.name if isinstance(self.tool_choice, NamedToolChoice) else None

    def tool_names(self) -> list[str]:
        return [t if isinstance(t, str) else t.name for t in self.tools or ()]

    def served_tool_names(self) -> list[str] | None:
        """The tools the fleet must serve (names and "server" definitions); None: all served ones."""
        if self.tools is None:
            return None
        return [
            t if isinstance(t, str) else t.name for t in self.tools if isinstance(t, str) or t.execution == "server"
        ]

    def client_tools(self) -> list[FunctionTool]:
        return [t for t in self.tools or () if isinstance(t, FunctionTool) and t.execution == "client"]

    def approval_required(self) -> set[str]:
        """Tools this request marks as needing approval (a served tool may also require it itself)."""
        return {t.name for t in self.tools or () if isinstance(t, FunctionTool) and t.requires_approval}


# ---------------------------------------------------------------- events


class EventType(str, Enum):
    queued = "queued"
    started = "started"
    token = "token"
    tool_call = "tool_call"
    tool_result = "tool_result"
    # The job paused for its caller (client tools, approvals); it holds no worker until answered.
    requires_action = "requires_action"
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
    action_timeout = "action_timeout"  # a pause for the caller ran past its deadline
    tool_service_unavailable = "tool_service_unavailable"
    engine_error = "engine_error"
    grammar_too_large = "grammar_too_large"  # the tools' or the answer's grammar passed the worker's budget
    grammar_dead_end = "grammar_dead_end"  # the output reached a point where its grammar allows no token
    worker_lost = "worker_lost"
    budget_exceeded = "budget_exceeded"  # the job's tokens across its rounds passed its tenant's cap
    internal = "internal"


class AttemptEnd(_Model):
    """How one attempt of a job ended when another worker took the job over
    (store/lua/claim.lua writes these into the record's ``attempts``)."""

    attempt: int
    worker: str = ""  # the worker that started it; "" when it never started
    # lease_expired: started, then its lease ran out (the worker died, or its loop stalled);
    # stalled: the same, and its worker later came back to find the job taken over (renew.lua);
    # not_started: taken over before any worker started it; handed_back: its worker let it go
    # (shutdown). Only lease_expired and stalled count towards TOOLQ_MAX_ATTEMPTS.
    ended: str
    ms: int = 0  # when it was taken over (Redis's clock)


class JobStatus(str, Enum):
    queued = "queued"
    running = "running"
    requires_action = "requires_action"  # paused: waits for tool results or approvals
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


FinishReason = Literal["stop", "max_iterations", "length", "cancelled", "timeout", "error", "tool_calls"]


class CachedTokens(_Model):
    """Cached prompt tokens by where the worker found them."""

    slot: int = 0  # the slot that ran the conversation's previous round
    slot_copy: int = 0  # copied from another slot (a shared system prompt and tools)
    host: int = 0  # a saved state in the worker's memory
    disk: int = 0  # a saved state on the worker's disk

    def add(self, other: CachedTokens) -> None:
        self.slot += other.slot
        self.slot_copy += other.slot_copy
        self.host += other.host
        self.disk += other.disk


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    # cached_prompt_tokens split by source; absent from workers that do not say (added in version 1)
    cached_tokens_by_source: CachedTokens | None = None

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_prompt_tokens += other.cached_prompt_tokens
        if other.cached_tokens_by_source is not None:
            if self.cached_tokens_by_source is None:
                self.cached_tokens_by_source = CachedTokens()
            self.cached_tokens_by_source.add(other.cached_tokens_by_source)

    @model_serializer(mode="wrap")
    def _absent_split_is_left_out(self, handler: Any) -> Any:
        # results and events written before the split existed read back byte for byte
        data = handler(self)
        if isinstance(data, dict) and data.get("cached_tokens_by_source", 0) is None:
            del data["cached_tokens_by_source"]
        return data


class Timings(_Model):
    queue_ms: float = 0.0
    generate_ms: float = 0.0
    tools_ms: float = 0.0
    total_ms: float = 0.0


ActionKind = Literal["client", "approval"]


class PendingAction(_Model):
    """A call a paused job waits on: its result from the client, or an approval."""

    id: str  # the tool call id
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    kind: ActionKind
    where: Where
    # the key the call's effect goes by (toolq/tools/effects.py): a client tool acts on it once
    effect_key: str | None = None

    @model_serializer(mode="wrap")
    def _without_absent_key(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # absent stays absent: a pause recorded before effect keys reads and writes back unchanged
        out: dict[str, Any] = handler(self)
        if out.get("effect_key") is None:
            out.pop("effect_key", None)
        return out


class RequiredAction(_Model):
    calls: list[PendingAction]
    deadline_ms: int  # unix ms; the job ends with error action_timeout after it


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
    # finish_reason "tool_calls" (on_client_tool "end"): the client tool calls left for the caller
    tool_calls: list[ToolCall] | None = None
