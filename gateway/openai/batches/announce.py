"""A batch's end, announced: ``batch.completed``, ``batch.failed``, ``batch.expired`` or
``batch.cancelled``, signed and sent at least once by the webhook sender like a job's events
(store/deliveries.py), to the tenant's default webhook (TOOLQ_WEBHOOK_DEFAULTS) as it was
when the batch was created (kept in the batch, so whichever gateway ends it sends to the same
place). A batch names no webhook of its own: OpenAI's Batch API has no field for one."""

from __future__ import annotations

import time

from gateway.state import GatewayState
from store.deliveries import record_batch_end

__all__ = ["announce_end", "webhook_of"]


def webhook_of(state: GatewayState, tenant: str) -> str:
    """The URL a new batch of ``tenant`` announces its end to; '' for none."""
    target = state.webhooks.defaults.get(tenant)
    return target.url if target is not None and state.webhooks.secrets.get(tenant) else ""


async def announce_end(state: GatewayState, batch_id: str, tenant: str) -> None:
    rec = await state.batches.record(batch_id, tenant)
    view = await state.batches.view(batch_id, tenant)
    if rec is not None and rec.get("webhook") and view is not None:
        await record_batch_end(state.store.redis, view, tenant, rec["webhook"], int(time.time() * 1000))
