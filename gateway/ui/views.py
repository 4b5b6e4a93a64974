"""The bodies of the dashboard's JSON endpoints (gateway/ui/api.py). They are the dashboard's own,
not the public API's (toolq/wire/api.py): they may change with the pages."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.ui.waterfall import Span
from store.job_index import JobRow
from store.records import JobRecord
from toolq.wire.protocol import JobResult, JobStatus, Message, PendingAction, RequiredAction, Timings, Usage


class Me(BaseModel):
    tenant: str | None  # None: an operator, who sees every tenant
    operator: bool
    open: bool  # no API keys configured: no sign-in, everyone sees everything


class LoginBody(BaseModel):
    key: str = Field(min_length=1, max_length=512)


class ModelLine(BaseModel):
    id: str
    queue_depth: int
    workers: int
    slots: int
    slots_busy: int
    decode_tps: float  # generated tokens per second, summed over its workers
    prefill_tps: float
    # counters since this gateway started (the client turns two readings into jobs per second)
    jobs_finished: int
    tokens_generated: int


class WorkerLine(BaseModel):
    id: str
    model: str
    host: str
    pid: int
    gpu: int | None
    busy: int  # jobs in hand
    jobs_done: int
    slots: int
    slots_busy: int
    batch_size: float
    decode_tps: float
    prefill_tps: float
    prompt_tokens: int
    cached_tokens: int  # prompt tokens a slot's cache already held
    format: str
    template: str
    heartbeat_ms: int
    mcp_tools: list[str]


class ServiceLine(BaseModel):
    id: str
    tools: list[str]
    busy: int
    concurrency: int
    host: str
    pid: int
    heartbeat_ms: int


class McpLine(BaseModel):
    tool: str
    workers: list[str]  # the workers whose MCP servers serve it


class Overview(BaseModel):
    now_ms: int
    models: list[ModelLine]
    workers: list[WorkerLine]
    services: list[ServiceLine]
    mcp: list[McpLine]


class JobLine(BaseModel):
    job_id: str
    tenant: str
    model: str
    status: JobStatus
    created_ms: int
    finished_ms: int | None
    attempt: int
    quarantined: bool = False  # ended worker_lost after too many lost attempts

    @classmethod
    def of_row(cls, row: JobRow) -> JobLine:
        return cls(
            job_id=row.job_id,
            tenant=row.tenant,
            model=row.model,
            status=row.status,
            created_ms=row.created_ms,
            finished_ms=row.finished_ms,
            attempt=row.attempt,
            quarantined=row.quarantined,
        )

    @classmethod
    def of_record(cls, rec: JobRecord) -> JobLine:
        return cls(
            job_id=rec.job_id,
            tenant=rec.tenant,
            model=rec.model,
            status=rec.status,
            created_ms=rec.created_ms,
            finished_ms=rec.finished_ms,
            attempt=rec.attempt,
            quarantined=rec.quarantined,
        )


class JobList(BaseModel):
    jobs: list[JobLine]
    next_cursor: str | None  # give it back as ?cursor= for older jobs


class JobDetail(BaseModel):
    job: JobLine
    terminal: bool
    seq: int  # the last event's seq: the live timeline follows from there
    tools: list[str]  # the tools the request offered, by name
    request_messages: list[Message]
    transcript: list[Message]  # the result's messages once ended, else the request's
    result: JobResult | None
    required_action: RequiredAction | None
    usage: Usage | None
    timings: Timings | None
    waterfall: list[Span]


class Approval(BaseModel):
    job: JobLine
    deadline_ms: int
    calls: list[PendingAction]  # the calls still unanswered
