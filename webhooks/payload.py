"""The body and headers of a delivery (Standard Webhooks: "Payload structure", "Webhook headers").

The body is a pure function of the recorded delivery, so every attempt sends the same bytes; the
``webhook-timestamp`` is the attempt's own and the signatures are made with the tenant's secrets
as configured at the time of the attempt (a rotation applies to retries at once).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from toolq.webhooks.deliveries import Delivery
from toolq.webhooks.signing import signature_header

TYPE_PREFIX = "job."  # event types: job.completed, job.failed, job.cancelled, job.requires_action


def body(d: Delivery) -> bytes:
    """A job's event as ``job.<kind>`` with ``data.job_id`` and ``data.event``; a batch's end as
    ``batch.<status>`` (its type already) with ``data.id`` and ``data.batch``, the batch object."""
    ts = d.event.get("ts", d.created_ms)
    when = datetime.fromtimestamp(ts / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    doc: dict[str, Any]
    if d.type.startswith("batch."):
        doc = {"type": d.type, "timestamp": when, "data": {"id": d.job_id, "batch": d.event.get("batch")}}
    else:
        doc = {"type": TYPE_PREFIX + d.type, "timestamp": when, "data": {"job_id": d.job_id, "event": d.event}}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def headers(d: Delivery, secrets: list[str], payload: bytes, now_s: int) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "user-agent": "toolq-webhooks",
        "webhook-id": d.id,
        "webhook-timestamp": str(now_s),
        "webhook-signature": signature_header(secrets, d.id, now_s, payload),
    }
