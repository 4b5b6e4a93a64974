"""Token budgets per tenant at submission (toolq/budgets.py decides), counted in the gateway's
429 metric by the budget's name."""

from __future__ import annotations

from gateway.state import GatewayState
from toolq.budgets import budget_refusal
from toolq.errors import BudgetExhausted
from toolq.tenants import policy_of


async def check_budgets(state: GatewayState, tenant: str) -> None:
    """Raise BudgetExhausted when a window's budget is spent (counted in the 429 metric)."""
    refused = await budget_refusal(state.store.redis, tenant, policy_of(state.settings.tenants, tenant))
    if refused is not None:
        raise counted(state, tenant, refused)


def counted(state: GatewayState, tenant: str, refused: BudgetExhausted) -> BudgetExhausted:
    """The refusal, counted in the 429 metric: the read above's, or the store's own when the
    script that queues the job found no room (store/budget_holds.py)."""
    state.metrics.refused(tenant, refused.budget)
    return refused
