"""Poison jobs: a job whose attempts keep ending with a lost worker ends ``error`` / ``worker_lost``.

store/lua/claim.lua decides, atomically with the takeover, that a job's lost attempts have
reached the bound (``TOOLQ_MAX_ATTEMPTS``): it marks the record ``quarantined`` under a new attempt
that no worker runs. The claimer then ends the job here, through the ordinary terminal event
(``JobStore.emit``: threads, webhooks, usage and metrics see it as any error), fenced by that
attempt. A job ends once: a second claimer that ends it too (the first was slow past its lease)
finds it ended.
"""

from __future__ import annotations

from typing import Any

from store import keys
from store.jobstore import JobEnded, JobNotFound, JobStore
from toolq.wire.payloads import ErrorData
from toolq.wire.protocol import AttemptEnd, ErrorCode, EventType

LOST = ("lease_expired", "stalled")  # how an attempt ends when it counts towards the bound


def lost_message(attempts: list[AttemptEnd]) -> str:
    lost = [a for a in attempts if a.ended in LOST]
    each = ", ".join(f"attempt {a.attempt} on {a.worker or 'an unknown worker'} ({a.ended})" for a in lost)
    return (
        f"the job's worker was lost on {len(lost)} attempts ({each}); "
        "it is quarantined and not run again (TOOLQ_MAX_ATTEMPTS)"
    )


async def end_lost(store: JobStore, job_id: str, attempt: int) -> bool:
    """End a job claim.lua quarantined under ``attempt``; False when it had ended already."""
    try:
        rec = await store.record(job_id)
    except JobNotFound:
        return False
    if rec.terminal or not rec.quarantined:
        return False
    message = lost_message(rec.attempts)
    result = rec.failed(attempt, "error", ErrorCode.worker_lost, message)
    data = ErrorData(code=ErrorCode.worker_lost.value, message=message, attempts=rec.attempts)
    try:
        await store.emit(job_id, EventType.error, data.to_wire(), attempt=attempt, result=result)
    except JobEnded:
        return False  # ended meanwhile (cancelled, or by another claimer): that stands
    return True


async def quarantined_counts(redis: Any) -> dict[str, int]:
    """How many jobs each model has ended as quarantined (the gateway's /metrics)."""
    found = await redis.hgetall(keys.QUARANTINED)
    return {model.decode(): int(n) for model, n in found.items()}
