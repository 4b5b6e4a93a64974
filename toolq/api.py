"""The HTTP API's response bodies (the request is toolq.protocol.JobRequest itself).

Here rather than in gateway/ because both sides use them: the gateway answers with them and the
client SDK returns them, typed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from toolq.protocol import JobResult, JobStatus, Where


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

    @classmethod
    def of_record(cls, job_id: str, rec: dict[str, str], *, created: bool) -> JobAccepted:
        return cls(
            job_id=job_id,
            status=JobStatus(rec["status"]),
            model=rec.get("model", ""),
            created=created,
            links=Links.of(job_id),
        )


class JobView(BaseModel):
    job_id: str
    status: JobStatus
    model: str
    attempt: int
    created_ms: int
    finished_ms: int | None = None
    result: JobResult | None = Field(default=None, description="present once the job has ended")
    links: Links

    @classmethod
    def of_record(cls, job_id: str, rec: dict[str, str]) -> JobView:
        """From the job's record as JobStore.record returns it."""
        return cls(
            job_id=job_id,
            status=JobStatus(rec["status"]),
            model=rec.get("model", ""),
            attempt=int(rec.get("attempt", 1)),
            created_ms=int(rec.get("created_ms", 0)),
            finished_ms=int(rec["finished_ms"]) if rec.get("finished_ms") else None,
            result=JobResult.model_validate_json(rec["result"]) if rec.get("result") else None,
            links=Links.of(job_id),
        )


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


class ModelView(BaseModel):
    id: str
    workers: int
    busy: int
    queue_depth: int = Field(description="jobs in the model's queue, waiting or running")
    tools: list[str]
    slots: int = Field(0, description="sequences the model's workers decode together, summed over workers")
    slots_busy: int = Field(0, description="of those, how many are generating now")


class ModelsView(BaseModel):
    models: list[ModelView]


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
