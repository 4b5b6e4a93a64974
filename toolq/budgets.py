"""Token budgets per tenant at submission, for every door that can read Redis (the gateway's
gateway/budgets.py, the SDK's Redis mode): a tenant whose jobs used up its ``tokens_per_minute``
or ``tokens_per_day`` (toolq/tenants.py) is refused with a 429 naming the budget, with
``Retry-After`` the seconds until that window ends. Usage is what the workers counted, round by
round (store/usage.py); the jobs in flight when a budget is reached still finish."""

from __future__ import annotations

from typing import Any

from store.usage import DAY_MS, MINUTE_MS, read_usage
from toolq.errors import BudgetExhausted
from toolq.tenants import TenantPolicy


async def budget_refusal(redis: Any, tenant: str, policy: TenantPolicy) -> BudgetExhausted | None:
    """The refusal of a tenant whose window's budget is spent; None when it may submit."""
    if policy.tokens_per_minute is None and policy.tokens_per_day is None:
        return None
    used = await read_usage(redis, tenant)
    for budget, limit, spent, window, what in (
        ("tokens_per_day", policy.tokens_per_day, used.day_tokens, DAY_MS, "today (UTC)"),
        ("tokens_per_minute", policy.tokens_per_minute, used.minute_tokens, MINUTE_MS, "this minute"),
    ):
        if limit is not None and spent >= limit:
            return BudgetExhausted(
                f"tenant {tenant!r} has used {spent} tokens {what}, its budget {budget} is {limit}; "
                "retry after the window ends",
                budget=budget,
                retry_after_s=used.retry_after_s(window),
            )
    return None
