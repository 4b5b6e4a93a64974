"""What an acknowledgement means: a write that someone outside Redis relies on waits for replicas.

Redis replicates asynchronously, so a failover can drop writes the old primary had already
answered. With ``TOOLQ_REDIS_WAIT_REPLICAS`` = N > 0 the writes below are sent together with
``WAIT N timeout`` on the same connection (one pipeline: WAIT counts the replicas that have this
connection's writes), and are acknowledged only once N replicas hold them:

- a submission, before it is accepted (202): ``NotReplicated`` otherwise (the gateway's 503 with Retry-After);
  the job is on the primary, and a retry with the same idempotency key gets it back;
- a caller's answers to a paused job, before their 200, likewise;
- a worker's ``started`` event, which writes the attempt's lease: once the replicas hold it, any
  later write a failover loses is recovered by a takeover when the lease runs out (without it, a
  job whose pick from arq's queue survived but whose start did not would stay queued for ever);
- a worker's announcement of the tool calls it is about to run (the checkpoint that makes a
  resumed attempt not run them again): the tools run only once it is replicated. When WAIT comes
  back short, ``confirm`` keeps asking (the event is still there, and the replicas have it) for up
  to ``TOOLQ_REDIS_WAIT_HOLD_S``; then the attempt is handed back without running them.

Every other write may be lost with a failed primary and is recovered from: a lost lease renewal
or heartbeat is written again on the next beat; lost events after the last replicated checkpoint
are produced again by the attempt that resumes from it (a lost terminal event leaves the job
running without a renewed lease, so another worker takes it over); a tool service's lost result
is delivered again, as its calls already are at least once (store/lua/service_result.lua).

With N = 0 (the default) nothing waits, as before.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from store import keys
from store.scripts import Script
from toolq.settings import RedisSettings

__all__ = ["Durability", "NotReplicated"]


class NotReplicated(Exception):
    """A write reached the primary, but not the replicas asked for within the time allowed: it
    is in effect now, yet a failover before it is replicated would drop it."""

    def __init__(self, what: str, *, job_id: str, acked: int, wanted: int, timeout_ms: int):
        self.what, self.job_id, self.acked, self.wanted = what, job_id, acked, wanted
        super().__init__(
            f"{what} of job {job_id} is recorded on the Redis primary, but {acked} of the {wanted} "
            f"replica(s) required (TOOLQ_REDIS_WAIT_REPLICAS) confirmed it within {timeout_ms} ms"
        )


@dataclass(frozen=True)
class Durability:
    replicas: int = 0  # 0: acknowledge what the primary has
    timeout_ms: int = 1000  # one WAIT's bound
    hold_s: float = 15.0  # how long a worker keeps confirming before it hands its attempt back

    @classmethod
    def from_settings(cls, settings: RedisSettings | None = None) -> Durability:
        s = settings or RedisSettings()
        return cls(s.redis_wait_replicas, s.redis_wait_timeout_ms, s.redis_wait_hold_s)

    @property
    def on(self) -> bool:
        return self.replicas > 0

    async def write(self, redis: Any, script: Script, **named: Any) -> tuple[Any, int]:
        """Run the script, then WAIT on the same connection; returns (the script's reply, the
        replicas that have it). Without replicas to wait for: (the reply, 0), as a plain call."""
        if not self.on:
            return await script(**named), 0
        async with redis.pipeline(transaction=False) as pipe:
            script.queue(pipe, **named)
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
            reply, acked = await pipe.execute()
        return reply, int(acked)

    def short(self, acked: int) -> bool:
        return self.on and acked < self.replicas

    def refuse(self, what: str, job_id: str, acked: int) -> NotReplicated:
        return NotReplicated(what, job_id=job_id, acked=acked, wanted=self.replicas, timeout_ms=self.timeout_ms)

    async def confirm(
        self, redis: Any, job_id: str, *, seq: int, attempt: int | None, hold_s: float | None = None
    ) -> bool:
        """Whether the job's event ``seq`` (written by ``attempt``; None: any) is on the primary
        of now and on the replicas asked for, asking again until ``hold_s`` has passed. False
        as soon as the event is gone: it was lost with a failed primary."""
        hold_s = self.hold_s if hold_s is None else hold_s
        script = Script(redis, "confirm")
        deadline = time.monotonic() + hold_s
        while True:
            try:
                found, acked = await self.write(
                    redis, script, job=keys.job(job_id), log=keys.log(job_id), seq=seq, attempt=attempt
                )
                if not found:
                    return False
                if acked >= self.replicas:
                    return True
            except (RedisError, OSError):
                await asyncio.sleep(0.2)  # a failover under way: the pool finds the new primary
            if time.monotonic() >= deadline:
                return False
