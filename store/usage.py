"""A tenant's token use, as the workers counted it, in the script that writes the job's events
(store/lua/emit.lua), so every figure outlives any process:

- the clock minute and the UTC day count a job's tokens round by round: each checkpoint a worker
  writes carries the job's figures so far, and the script adds what they add to the record's
  ``counted_tokens`` in the same step (the terminal event adds the rest). The stored checkpoint
  and ``counted_tokens`` agree, so an attempt resumed from that checkpoint after a crash counts
  on from there: each token once per job, and a budget sees a long job's tokens while it runs,
  not only when it ends (it can still be overrun by the rounds in flight when it is reached);
- the running total (prompt, completion, tokens, jobs) is added once per job, with its terminal
  event.

Windows are on Redis's clock, the one every gateway shares. Beside each window, what the
tenant's unfinished jobs reserved against its budgets (store/budget_holds.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store import keys

MINUTE_MS = 60_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class TenantUsage:
    tenant: str
    now_ms: int  # Redis's clock when read
    minute_tokens: int  # this clock minute
    day_tokens: int  # this UTC day
    prompt_tokens: int  # since the start
    completion_tokens: int
    tokens: int
    jobs: int  # jobs counted (ended)
    minute_held: int = 0  # tokens its unfinished jobs reserved this minute (store/budget_holds.py)
    day_held: int = 0  # and today

    def retry_after_s(self, window_ms: int) -> int:
        """Seconds until the current window ends (at least 1)."""
        return max(1, -(-(window_ms - self.now_ms % window_ms) // 1000))


async def read_usage(redis: Any, tenant: str) -> TenantUsage:
    secs, micros = await redis.time()
    now = int(secs) * 1000 + int(micros) // 1000
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(keys.usage_window(tenant, "minute", now // MINUTE_MS))
        pipe.get(keys.usage_window(tenant, "day", now // DAY_MS))
        pipe.hgetall(keys.usage_total(tenant))
        pipe.get(keys.budget_held(tenant, "minute", now // MINUTE_MS))
        pipe.get(keys.budget_held(tenant, "day", now // DAY_MS))
        minute, day, total, minute_held, day_held = await pipe.execute()
    t = {k.decode(): int(v) for k, v in (total or {}).items()}
    return TenantUsage(
        tenant=tenant,
        now_ms=now,
        minute_tokens=int(minute or 0),
        day_tokens=int(day or 0),
        prompt_tokens=t.get("prompt_tokens", 0),
        completion_tokens=t.get("completion_tokens", 0),
        tokens=t.get("tokens", 0),
        jobs=t.get("jobs", 0),
        minute_held=int(minute_held or 0),
        day_held=int(day_held or 0),
    )
