"""The HTTP API's response bodies (the request is toolq.wire.protocol.JobRequest itself).

Here rather than in gateway/ because both sides use them: the gateway answers with them and the
client SDK returns them, typed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolq.wire.limits import MAX_REASON_CHARS, MAX_TOOL_RESULT_BYTES
from toolq.wire.protocol import (
    JobResult,
    JobStatus,
    RequiredAction,
    Where,
)


class Links(BaseModel):
    self: str
    events: str
    cancel: str

    @classmethod
    def of(cls, job_id: str) -> Links:
        base = f"/v1/jobs/{job_id}"
        return cls(self=base, events=f"{base}/events", cancel=f"{base}/cancel")


class JobAccepted(BaseModel):
    job_id: str
    status: JobStatus
    model: str
    created: bool = Field(description="false when an Idempotency-Key matched an earlier job")
    links: Links


class JobView(BaseModel):
    job_id: str
    status: JobStatus
    model: str
    attempt: int
    created_ms: int
    finished_ms: int | None = None
    result: JobResult | None = Field(default=None, description="present once the job has ended")
    required_action: RequiredAction | None = Field(
        default=None, description="while the job is paused (requires_action): the calls still unanswered"
    )
    links: Links


# ---------------------------------------------------------------------- answers to a paused job


class ToolResult(BaseModel):
    """The caller's result for one call of a client tool (POST /v1/jobs/{id}/tool_results)."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(min_length=1, max_length=128)
    content: str = Field(
        max_length=MAX_TOOL_RESULT_BYTES,
        description=f"what the tool returned, as text; at most {MAX_TOOL_RESULT_BYTES} bytes of UTF-8",
    )
    is_error: bool = Field(default=False, strict=True, description="the tool failed; content says why")

    @field_validator("content")
    @classmethod
    def _bounded(cls, v: str) -> str:
        size = len(v.encode("utf-8"))  # pydantic already refused lone surrogates
        if size > MAX_TOOL_RESULT_BYTES:
            raise ValueError(f"content is {size} bytes of UTF-8, above the limit of {MAX_TOOL_RESULT_BYTES}")
        return v

    def answer(self) -> dict[str, Any]:
        """As recorded in the job's ``actions`` and read by the worker's loop on resume."""
        return {"content": self.content, "is_error": self.is_error}


class ApprovalDecision(BaseModel):
    """The caller's decision on one call that needs approval (POST /v1/jobs/{id}/approvals)."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(min_length=1, max_length=128)
    approved: bool = Field(strict=True)  # "yes" or 1 is not a decision
    reason: str | None = Field(
        default=None, max_length=MAX_REASON_CHARS, description="why; a denied call's tool response quotes it"
    )

    def answer(self) -> dict[str, Any]:
        return {"approved": self.approved, "reason": self.reason}


class CancelView(BaseModel):
    job_id: str
    status: JobStatus = Field(description="cancelled, or running while the worker stops it, or how it already ended")


class ToolSpec(BaseModel):
    type: Literal["function"] = "function"
    function: dict[str, Any]
    models: list[str] = Field(description="models whose jobs can call this tool")
    where: Where = Field("worker", description="where its calls run: the workers, or a tool service")
    requires_approval: bool = Field(False, description="every call waits for the caller's approval")


class ToolsView(BaseModel):
    tools: list[ToolSpec]


class WorkerCache(BaseModel):
    """One worker's cache as the fleet sees it (store/affinity.py)."""

    worker: str
    conversations: int = Field(0, description="conversations it holds and tells the fleet, for affinity")
    bytes: dict[str, int] = Field(
        default_factory=dict, description="bytes of saved state per cache tier, where its engine reports them"
    )
    slots: int = 0
    busy: int = Field(0, description="jobs it runs now")


class ModelView(BaseModel):
    """A served model: OpenAI's Model object (``id``, ``object``, ``created``, ``owned_by``), with
    toolq's view of the fleet as extra keys."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(0, description="unix seconds: when a live worker of the model last reported")
    owned_by: str = "toolq"
    workers: int
    busy: int
    queue_depth: int = Field(description="jobs in the model's queue, waiting or running")
    tools: list[str]
    slots: int = Field(0, description="sequences the model's workers decode together, summed over workers")
    slots_busy: int = Field(0, description="of those, how many are generating now")
    format: str = Field(
        "", description="the tool-call format its workers parse (several, comma-separated, while they differ)"
    )
    caches: list[WorkerCache] = Field(default_factory=list, description="each live worker's cache, by worker id")
    placements: dict[str, int] = Field(
        default_factory=dict,
        description="jobs offered first to the worker holding their conversation, by how they were placed so far: "
        "affinity (that worker), fallback_wait, fallback_gone, fallback_full (another worker, and why)",
    )
    declared: bool = Field(False, description="declared in the gateway's configuration: accepted with no worker")
    slots_per_worker: int = Field(1, description="slots of one of its workers (the declared figure while none is live)")
    workers_needed: int = Field(
        0,
        description="workers its queue fills: ceil(queue_depth / slots_per_worker); not jobs. "
        "What an autoscaler (deploy/k8s/keda.yaml) scales on; 0 lets it scale to zero",
    )


class ModelsView(BaseModel):
    """OpenAI's model list shape, so ``client.models.list()`` of the openai SDK reads it."""

    object: Literal["list"] = "list"
    data: list[ModelView]


class Readiness(BaseModel):
    ready: bool
    redis: bool
    workers: int
    reason: str | None = None


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    details: list[dict[str, Any]] | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class UsageView(BaseModel):
    """GET /v1/usage: the caller's own tenant's figures and policy (toolq/tenants.py)."""

    tenant: str
    tokens_this_minute: int = Field(description="prompt + completion tokens of jobs ended this clock minute")
    tokens_today: int = Field(description="the same, this UTC day")
    tokens: int = Field(description="the same, since usage was first counted")
    prompt_tokens: int
    completion_tokens: int
    jobs: int = Field(description="jobs whose tokens were counted (ended jobs)")
    waiting: int = Field(description="jobs waiting for a fair turn, every model")
    running: int = Field(description="jobs handed to a worker and not ended or paused")
    started: int = Field(description="jobs handed to a worker so far")
    weight: float
    max_running: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    job_tokens: int | None = None
    max_queued: int | None = None
    max_threads: int | None = None
    max_thread_messages: int | None = None
    store_bytes: int | None = Field(
        default=None, description="the bytes the tenant may keep in the job store (its own or the gateway's default)"
    )
    store_bytes_used: dict[str, int] = Field(
        default_factory=dict,
        description="the bytes it keeps there, as counted: total, job (records), thread (messages), file",
    )
