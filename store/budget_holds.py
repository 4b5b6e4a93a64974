"""Token budgets charged atomically: what store/lua/lib/budget.lua needs, and its refusal.

A tenant's ``tokens_per_day`` and ``tokens_per_minute`` (toolq/tenants.py) are checked in the
script that queues a job (submit.lua, thread_run.lua), not read before it: a read at submission
lets any number of parallel submissions see the same remaining budget and all pass. Per tenant
and window a counter holds the tokens its unfinished jobs reserved; a job is admitted while the
window's use (store/usage.py) plus that counter is below the budget, and reserves its *ceiling*,
at most what is left, in the same step. So the reservations of a window never add up past its
budget, however many submissions arrive at once. As the workers count a job's tokens into the
window its reservation shrinks by as much (use replaces reservation, never counted twice), and
its terminal event gives back the rest (emit.lua).

The ceiling: the tenant's ``job_tokens`` when set, since the worker ends a job that passes it
(worker/budget.py), so it bounds the job; else ``max_tokens x max_iterations``, the most tokens
the job can generate (its prompts are not in it: they are not known before the worker renders
them, and a ceiling that guessed them would refuse jobs that fit). What a job spends past its
reservation still counts in the window when it is spent, so a budget can be overrun by what the
jobs in flight spend beyond their ceilings, never by how many were admitted at once.

A paused job keeps its reservation while it waits; one that resumes in a later window does not
reserve again (its new window counts what it spends).
"""

from __future__ import annotations

from typing import Any

from toolq.errors import BudgetExhausted
from toolq.tenants import TenantPolicy
from toolq.wire.protocol import JobRequest

REFUSED = -20  # budget.lua's refusal code
_WINDOWS = {"tokens_per_day": "today (UTC)", "tokens_per_minute": "this minute"}


def ceiling(request: JobRequest, policy: TenantPolicy) -> int:
    """The tokens a job reserves against its tenant's budgets (above)."""
    return policy.job_tokens or request.max_tokens * request.max_iterations


def script_args(request: JobRequest, policy: TenantPolicy | None) -> dict[str, Any]:
    """budget.lua's inputs for a job of a tenant with ``policy`` (None or no budget: no check)."""
    budgeted = policy is not None and (policy.tokens_per_day is not None or policy.tokens_per_minute is not None)
    return {
        "tokens_per_day": policy.tokens_per_day if policy else None,
        "tokens_per_minute": policy.tokens_per_minute if policy else None,
        "budget_ceiling": ceiling(request, policy) if budgeted and policy else None,
    }


def exhausted(tenant: str, budget: str, used: int, held: int, limit: int, retry_after_s: int) -> BudgetExhausted:
    """The 429 naming the spent budget (``held``: tokens reserved by the tenant's unfinished jobs)."""
    reserved = f" and its jobs in flight hold {held} more" if held else ""
    return BudgetExhausted(
        f"tenant {tenant!r} has used {used} tokens {_WINDOWS[budget]}{reserved}, its budget {budget} is {limit}; "
        "retry after the window ends",
        budget=budget,
        retry_after_s=retry_after_s,
    )


def refusal(tenant: str, reply: list[Any]) -> BudgetExhausted:
    """The exception of budget.lua's refusal {-20, budget, used, held, limit, ms until the window ends}."""
    _, budget, used, held, limit, left_ms = reply
    name = budget.decode() if isinstance(budget, bytes) else str(budget)
    return exhausted(tenant, name, int(used), int(held), int(limit), max(1, -(-int(left_ms) // 1000)))
