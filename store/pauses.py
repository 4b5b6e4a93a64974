"""The deadline of a paused job: one that waits on its caller past ``action_deadline_ms`` ends with
``error`` code ``action_timeout``.

Paused jobs are indexed in ``keys.PAUSED`` by deadline (store/lua/pause.lua adds them; an answer
that resumes the job, or a cancel, removes them). Any worker sweeps it from its heartbeat
(worker/heartbeat.py). The error is written only while the job is still paused under the attempt
the sweep read, so an answer that lands first wins, and a job that was resumed and paused again
keeps its new deadline.
"""

from __future__ import annotations

from store import keys
from store.jobstore import JobEnded, JobNotFound, JobStore
from toolq.wire.payloads import ErrorData
from toolq.wire.protocol import ErrorCode, EventType, JobStatus, now_ms


async def expire_overdue(store: JobStore, *, limit: int = 100) -> list[str]:
    """End every paused job whose deadline has passed; returns their ids."""
    now = now_ms()
    overdue = await store.redis.zrangebyscore(keys.PAUSED, "-inf", now, start=0, num=limit)
    ended = []
    for raw in overdue:
        job_id = raw.decode()
        try:
            if await _expire(store, job_id, now):
                ended.append(job_id)
        except JobNotFound:
            await store.redis.zrem(keys.PAUSED, job_id)
    return ended


async def _expire(store: JobStore, job_id: str, now: int) -> bool:
    rec = await store.record(job_id)
    if rec.paused and (rec.action_deadline_ms or 0) > now:
        return False  # paused again since the index was read, with a later deadline
    if not rec.paused:
        await store.redis.zrem(keys.PAUSED, job_id)
        return False
    attempt = rec.attempt
    waits = sorted(c for c, a in rec.actions.items() if a.get("answer") is None)
    message = f"the job waited on its caller past its deadline (calls {', '.join(waits) or 'none'} unanswered)"
    result = rec.failed(attempt, "timeout", ErrorCode.action_timeout, message)
    try:
        await store.emit(
            job_id,
            EventType.error,
            ErrorData(code=ErrorCode.action_timeout.value, message=message).to_wire(),
            attempt=attempt,
            result=result,
            only_if_status=JobStatus.requires_action,
        )
    except JobEnded:
        return False  # answered, cancelled or resumed meanwhile: that won
    await store.redis.zrem(keys.PAUSED, job_id)
    return True
