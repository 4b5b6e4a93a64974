"""Webhook deliveries on the wire: what the gateway's delivery routes answer and the SDK returns.

The store keeps them in Redis (store/deliveries.py); this module is only their shape, so the light
client reads them without loading anything of the store.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from toolq.wire.protocol import WebhookEvent

# A batch's end (gateway/openai/batches/runner.py), sent to its tenant's default webhook.
BatchWebhookEvent = Literal["batch.completed", "batch.failed", "batch.expired", "batch.cancelled"]

DeliveryStatus = Literal["pending", "sending", "delivered", "failed"]


class Attempt(BaseModel):
    """One try at sending a delivery."""

    at_ms: int  # when it started (unix ms)
    duration_ms: int
    status_code: int | None = None  # the receiver's answer; None when none came
    error: str | None = None  # why it failed; None when delivered


class Delivery(BaseModel):
    """One webhook delivery: one event of one job, to one URL."""

    id: str  # the webhook-id header
    job_id: str
    tenant: str
    url: str
    type: WebhookEvent | BatchWebhookEvent
    status: DeliveryStatus
    attempts: int = 0  # attempts started (an attempt cut short by a dead sender counts)
    created_ms: int
    next_ms: int | None = None  # when it is next due, while pending
    finished_ms: int | None = None  # when it was delivered or given up
    last_error: str | None = None
    event: dict[str, Any] = Field(default_factory=dict)  # the job event it reports
    history: list[Attempt] | None = None  # filled where asked for
