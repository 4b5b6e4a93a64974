"""Leases: how a running job shows that its worker is alive, and how a lost worker's job is taken over.

A running job's id sits in the sorted set ``keys.LEASES`` scored by its deadline on Redis's clock.
The ``started`` event sets the first lease in the same script that writes it (store/lua/emit.lua)
and a terminal event drops it; in between the worker renews it every heartbeat. Any live worker of
the model claims a job whose lease ran out as a new attempt, which fences the old worker's writes
off, and enqueues that attempt to resume the job from its checkpoint, unless the job's attempts
were lost too often: then it is quarantined (store/lua/claim.lua, store/quarantine.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from store import keys
from store.scripts import Script


class Claim(NamedTuple):
    job_id: str
    attempt: int  # the new attempt: it fences off the old worker's writes
    quarantine: bool = False  # end the job with worker_lost rather than run this attempt


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
        self, model: str, grace_ms: int, limit: int = 100, settle_ms: int = 10_000, max_attempts: int = 3
    ) -> list[Claim]:
        """Take over every job of this model whose lease ran out.

        The caller enqueues each new attempt, or ends a quarantined job (store/quarantine.py).
        The claim leaves a lease of ``grace_ms`` so that, if the caller dies before doing so, the
        job is claimed again rather than lost. For ``settle_ms`` after Redis restarts, leases that
        ran out while it was down are left for their workers to renew (they may be alive and only
        have lost their connection). A job whose attempts were lost ``max_attempts`` times
        (claim.lua says which count) comes back with ``quarantine`` set, and is not to be run.
        """
        flat = await self._claim(
            leases=keys.LEASES,
            quarantined=keys.QUARANTINED,
            model=model,
            grace_ms=grace_ms,
            limit=limit,
            settle_ms=settle_ms,
            max_attempts=max_attempts,
        )
        return [Claim(flat[i].decode(), int(flat[i + 1]), bool(flat[i + 2])) for i in range(0, len(flat), 3)]

    async def release(self, job_id: str) -> None:
        """Make a job claimable at once (a worker handing it back on shutdown)."""
        await self.redis.zadd(keys.LEASES, {job_id: 0}, xx=True)
