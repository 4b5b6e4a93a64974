"""The HTTP API's bodies for threads (/v1/threads), shared by the gateway and the SDK.

A run's body is a JobRequest whose ``messages`` are the run's new input (the job sees the
thread's messages first), plus how to treat a run already active on the thread
(``multitask_strategy``, LangGraph's name) and whether a failed or cancelled run keeps what it did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolq.errors import InvalidRequest
from toolq.wire.protocol import JobRequest, JobStatus, Message

MAX_METADATA_KEYS = 16  # as OpenAI allows on a conversation
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
MAX_TTL_S = 365 * 86400
MAX_THREAD_MESSAGES = 1000  # in one create or append
MAX_PAGE = 100

Strategy = Literal["reject", "enqueue", "interrupt", "rollback"]


def check_metadata(v: dict[str, str]) -> dict[str, str]:
    if len(v) > MAX_METADATA_KEYS:
        raise ValueError(f"metadata has {len(v)} keys, at most {MAX_METADATA_KEYS} are allowed")
    for k, val in v.items():
        if not 1 <= len(k) <= MAX_METADATA_KEY:
            raise ValueError(f"metadata key {k[:80]!r} must be 1 to {MAX_METADATA_KEY} characters")
        if len(val) > MAX_METADATA_VALUE:
            raise ValueError(f"metadata value of {k!r} is longer than {MAX_METADATA_VALUE} characters")
    return v


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThreadCreate(_Body):
    metadata: dict[str, str] = Field(default_factory=dict, description="up to 16 string pairs")
    ttl_s: int | None = Field(default=None, ge=1, le=MAX_TTL_S, description="seconds it lives after its last write")
    messages: list[Message] = Field(default_factory=list, max_length=MAX_THREAD_MESSAGES)

    _metadata = field_validator("metadata")(check_metadata)


class MessagesAppend(_Body):
    messages: list[Message] = Field(min_length=1, max_length=MAX_THREAD_MESSAGES)


class ThreadMessage(BaseModel):
    id: str
    message: Message


class MessagePage(BaseModel):
    data: list[ThreadMessage]
    first_id: str | None
    last_id: str | None
    has_more: bool


def page(
    items: Sequence[tuple[str, Any]], *, after: str | None, limit: int, order: Literal["asc", "desc"]
) -> tuple[list[tuple[str, Any]], bool]:
    """One page of (id, item) pairs after the item ``after``, in ``order``; and whether more follow.
    Raises InvalidRequest (field ``after``) when no item has that id."""
    ordered = list(items) if order == "asc" else list(reversed(items))
    start = 0
    if after is not None:
        ids = [i for i, _ in ordered]
        if after not in ids:
            raise InvalidRequest(f"after: no item {after!r} in this thread", field="after")
        start = ids.index(after) + 1
    chosen = ordered[start : start + limit]
    return chosen, start + limit < len(ordered)


class ThreadSummary(BaseModel):
    id: str
    object: Literal["thread"] = "thread"
    created_ms: int
    metadata: dict[str, str]
    ttl_s: int | None
    active_run: str | None
    waiting_runs: int
    message_count: int


class ThreadView(ThreadSummary):
    messages: MessagePage


class ThreadList(BaseModel):
    data: list[ThreadSummary]
    has_more: bool
    next_before_ms: int | None = Field(description="pass as ?before_ms= for the next page")


class ThreadDeleted(BaseModel):
    id: str
    object: Literal["thread.deleted"] = "thread.deleted"
    deleted: bool = True


class RunRequest(JobRequest):
    """A run: ``messages`` is the new input; the job sees the thread's messages before it."""

    multitask_strategy: Strategy = Field(
        default="enqueue",  # LangGraph's default too
        description="when a run is active: enqueue (after it; the default), reject (409), interrupt (stop it, keep "
        "its partial history), rollback (stop it, drop its history)",
    )
    partial_history: bool = Field(
        default=False, description="append what this run did to the thread even if it fails or is cancelled"
    )

    @field_validator("idempotency_key")
    @classmethod
    def _no_idempotency(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError("runs on a thread take no idempotency key (a retried run is a new run)")
        return v

    def job(self) -> JobRequest:
        return JobRequest.model_validate(self.model_dump(exclude={"multitask_strategy", "partial_history"}))


class RunAccepted(BaseModel):
    job_id: str
    thread_id: str
    status: JobStatus
    state: Literal["started", "waiting", "interrupting"] = Field(
        description="started now, or waiting behind active_run (which an interrupt or rollback is stopping)"
    )
    active_run: str | None
    model: str
    events: str


class RunView(BaseModel):
    job_id: str
    status: JobStatus | None = Field(description="null once the job's record has expired")


class RunList(BaseModel):
    data: list[RunView]
