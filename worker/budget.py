"""The per-job token cap: a job whose prompt and completion tokens, over all its rounds (and its
earlier attempts, which its checkpoint carries), pass its tenant's ``job_tokens`` is stopped and
ends with ``error`` / ``budget_exceeded``, naming the tokens it used.

The cap comes from the job's record (the gateway stamps its tenant's policy there at submission,
store/lua/submit.lua), else from this worker's own ``TOOLQ_TENANTS`` (a job submitted
straight into Redis). The loop adds a round's tokens when the round's generation returns, so the
job stops after the round that crossed the cap, within a poll (a round is bounded by max_tokens);
a job whose last round crossed it ends the same way rather than with its answer
(worker/jobrun.py checks before publishing the outcome).
"""

from __future__ import annotations

import asyncio

from store.records import JobRecord
from toolq.tenants import TenantPolicy, policy_of
from toolq.wire.protocol import Usage
from worker.endings import StopCause
from worker.state import RunningJob

BUDGET_POLL_S = 0.05


def job_token_cap(record: JobRecord, tenants: dict[str, TenantPolicy]) -> int | None:
    if record.job_tokens is not None:
        return record.job_tokens
    return policy_of(tenants, record.tenant).job_tokens


def tokens(usage: Usage) -> int:
    return usage.prompt_tokens + usage.completion_tokens


def over_budget(usage: Usage, cap: int | None) -> bool:
    return cap is not None and tokens(usage) > cap


def over_budget_message(usage: Usage, cap: int) -> str:
    return (
        f"the job used {tokens(usage)} tokens ({usage.prompt_tokens} prompt + {usage.completion_tokens} "
        f"completion) across its rounds, above its tenant's cap of {cap} tokens per job (job_tokens)"
    )


async def watch_budget(running: RunningJob, usage: Usage, cap: int | None) -> None:
    """Stop the job once ``usage`` (the loop's running total) passes ``cap``."""
    if cap is None:
        return
    while not running.task.done():
        if over_budget(usage, cap):
            running.interrupt(StopCause.budget_exceeded)
            return
        await asyncio.sleep(BUDGET_POLL_S)
