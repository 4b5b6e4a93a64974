"""Token budgets per tenant, read before a submission for every door that can read Redis (the
gateway's gateway/budgets.py, the SDK's Redis mode): a tenant whose window's use plus what its
unfinished jobs reserved reaches its ``tokens_per_minute`` or ``tokens_per_day``
(toolq/tenants.py) is refused with a 429 naming the budget, with ``Retry-After`` the seconds until
that window ends. This read refuses early, before the other checks; the budget is charged, and
checked again, atomically in the script that queues the job (store/budget_holds.py), so parallel
submissions cannot overrun it. Usage is what the workers counted, round by round
(store/usage.py)."""

from __future__ import annotations

from typing import Any

from store.budget_holds import exhausted
from store.usage import DAY_MS, MINUTE_MS, read_usage
from toolq.errors import BudgetExhausted
from toolq.tenants import TenantPolicy


async def budget_refusal(redis: Any, tenant: str, policy: TenantPolicy) -> BudgetExhausted | None:
    """The refusal of a tenant whose window's budget is spent or reserved; None when it may submit."""
    if policy.tokens_per_minute is None and policy.tokens_per_day is None:
        return None
    used = await read_usage(redis, tenant)
    for budget, limit, spent, held, window in (
        ("tokens_per_day", policy.tokens_per_day, used.day_tokens, used.day_held, DAY_MS),
        ("tokens_per_minute", policy.tokens_per_minute, used.minute_tokens, used.minute_held, MINUTE_MS),
    ):
        if limit is not None and spent + held >= limit:
            return exhausted(tenant, budget, spent, held, limit, used.retry_after_s(window))
    return None
