"""Paused jobs made straight in Redis, as a worker leaves them, for tests of the answer path that
need no worker."""

from __future__ import annotations

from typing import Literal

from toolq.protocol import EventType, JobRequest, JobStatus, Message, PendingAction, now_ms
from toolq.store.jobstore import JobStore


def pending(call_id: str, kind: Literal["client", "approval"], name: str = "lookup") -> PendingAction:
    return PendingAction(id=call_id, name=name, arguments={"q": call_id}, kind=kind, where="client")


async def paused_job(
    store: JobStore, *calls: PendingAction, tenant: str = "default", model: str = "m", deadline_ms: int | None = None
) -> str:
    """A job paused by its first attempt (status requires_action), waiting on ``calls``."""
    job_id, _ = await store.submit(
        JobRequest(messages=[Message(role="user", content="hi")]), model=model, tenant=tenant
    )
    await store.emit(job_id, EventType.started, {}, attempt=1, status=JobStatus.running, lease_ms=10_000)
    await store.pause(
        job_id,
        attempt=1,
        pending=list(calls),
        deadline_ms=deadline_ms or now_ms() + 60_000,
        checkpoint={"messages": [{"role": "user", "content": "hi"}], "iterations": 1},
    )
    return job_id
