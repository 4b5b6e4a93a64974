"""Where a batch's end is announced: ``batch.completed``, ``batch.failed``, ``batch.expired`` or
``batch.cancelled``, signed and sent at least once by the webhook sender like a job's events
(store/deliveries.py), to the tenant's default webhook (TOOLQ_WEBHOOK_DEFAULTS) as it was
when the batch was created (kept in the batch, so whichever gateway ends it sends to the same
place). The store records the announcement in the transaction that ends the batch
(store/batches.py), so a gateway that dies there leaves no ended batch unannounced. A batch
names no webhook of its own: OpenAI's Batch API has no field for one."""

from __future__ import annotations

from gateway.state import GatewayState

__all__ = ["webhook_of"]


def webhook_of(state: GatewayState, tenant: str) -> str:
    """The URL a new batch of ``tenant`` announces its end to; '' for none."""
    target = state.webhooks.defaults.get(tenant)
    return target.url if target is not None and state.webhooks.secrets.get(tenant) else ""
