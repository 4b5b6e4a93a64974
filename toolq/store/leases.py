"""Leases: how a running job shows that its worker is alive, and how a lost worker's job is taken over.

A running job's id sits in the sorted set ``keys.LEASES`` scored by its deadline on Redis's clock.
The ``started`` event sets the first lease in the same script that writes it (toolq/store/lua/emit.lua)
and a terminal event drops it; in between the worker renews it every heartbeat. Any live worker of
the model claims a job whose lease ran out as a new attempt, which fences the old worker's writes
off, and enqueues that attempt to resume the job from its checkpoint.
"""

from __future__ import annotations

from typing import Any

from toolq.store import keys
from toolq.store.scripts import Script


class Leases:
    def __init__(self, redis: Any):
        self.redis = redis
        self._renew = Script(redis, "renew")
        self._claim = Script(redis, "claim")

    async def renew(self, job_id: str, attempt: int, lease_ms: int) -> bool:
        """Extend the lease; False once this attempt no longer owns the job (or it ended)."""
        return bool(
            await self._renew(
                leases=keys.LEASES, job=keys.job(job_id), job_id=job_id, attempt=attempt, lease_ms=lease_ms
            )
        )

    async def claim_expired(
        self, model: str, grace_ms: int, limit: int = 100, settle_ms: int = 10_000
    ) -> list[tuple[str, int]]:
        """Take over every job of this model whose lease ran out; returns (job id, new attempt).

        The caller enqueues each new attempt. The claim leaves a lease of ``grace_ms`` so that, if
        the caller dies before enqueueing, the job is claimed again rather than lost. For
        ``settle_ms`` after Redis restarts, leases that ran out while it was down are left for their
        workers to renew (they may be alive and only have lost their connection).
        """
        flat = await self._claim(
            leases=keys.LEASES,
            model=model,
            job_prefix=keys.JOB_PREFIX,
            grace_ms=grace_ms,
            limit=limit,
            settle_ms=settle_ms,
        )
        return [(flat[i].decode(), int(flat[i + 1])) for i in range(0, len(flat), 2)]

    async def release(self, job_id: str) -> None:
        """Make a job claimable at once (a worker handing it back on shutdown)."""
        await self.redis.zadd(keys.LEASES, {job_id: 0}, xx=True)
