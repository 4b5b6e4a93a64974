"""Webhook deliveries in Redis: recorded with the event they report, claimed under a lease, settled.

- A job's webhook (``JobRequest.webhook``) is written into its record by submit.lua. When the job
  writes an event a webhook may report (a terminal event in emit.lua, ``requires_action`` in
  pause.lua), the same script records the delivery (lua/lib/webhook_record.lua): its hash, its id in
  the due set and in the job's delivery log. ``script_args`` gives those scripts the keys.
- The sender (`toolq webhooks`) claims due deliveries under a lease (lua/webhook_claim.lua): a
  sender killed mid-delivery loses nothing, the delivery comes due again when the lease ends.
- Each attempt is settled by the claim's holder only (lua/webhook_settle.lua): delivered, tried
  again later, or dead (the tenant's dead-letter list). ``redeliver`` sends a dead one again.

The delivery id is the ``webhook-id`` header: the same on every attempt and every redelivery.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal

from store import keys
from store.scripts import Script
from toolq.webhooks.deliveries import Attempt, Delivery
from toolq.wire.protocol import EventType, WebhookEvent

# The webhook event each job event is, for the events a webhook may report.
WEBHOOK_KIND: dict[EventType, WebhookEvent] = {
    EventType.final: "completed",
    EventType.error: "failed",
    EventType.cancelled: "cancelled",
    EventType.requires_action: "requires_action",
}


def new_delivery_id() -> str:
    # No '.' in it: the signed content is "{id}.{timestamp}.{payload}" (Standard Webhooks).
    return "msg_" + secrets.token_hex(12)


def script_args(job_id: str, event: EventType) -> dict[str, Any]:
    """The webhook inputs of emit.lua and pause.lua for one event of one job."""
    delivery_id = new_delivery_id()
    return {
        "webhook_due": keys.WEBHOOK_DUE,
        "webhook_wake": keys.WEBHOOK_WAKE,
        "webhook_delivery": keys.delivery(delivery_id),
        "webhook_job_log": keys.job_deliveries(job_id),
        "webhook_kind": WEBHOOK_KIND.get(event),
        "webhook_id": delivery_id,
    }


def delivery_of_hash(h: dict[str, str]) -> Delivery:
    """A delivery as its hash keeps it."""
    ints = ("attempts", "created_ms", "next_ms", "finished_ms")
    fields: dict[str, Any] = {k: v for k, v in h.items() if k in Delivery.model_fields}
    for k in ints:
        if k in fields:
            fields[k] = int(fields[k])
    fields["last_error"] = h.get("last_error") or None
    fields["event"] = json.loads(h.get("event") or "{}")
    return Delivery(**fields)


def queue_batch_end(pipe: Any, batch: dict[str, Any], tenant: str, url: str, now_ms: int) -> str:
    """Add to ``pipe`` (the transaction that ends the batch, store/batches.py) the delivery of a
    batch's end (``batch.<status>``, the batch object as its event), as the scripts record a
    job's: due now, in the batch's delivery log, the sender woken."""
    delivery_id = new_delivery_id()
    event = json.dumps({"ts": now_ms, "batch": batch}, ensure_ascii=False)
    fields = {
        "id": delivery_id, "job_id": batch["id"], "tenant": tenant, "url": url, "type": f"batch.{batch['status']}",
        "event": event, "status": "pending", "attempts": 0, "created_ms": now_ms, "since_ms": now_ms, "next_ms": now_ms,
    }  # fmt: skip
    pipe.hset(keys.delivery(delivery_id), mapping=fields)
    pipe.zadd(keys.WEBHOOK_DUE, {delivery_id: now_ms})
    pipe.rpush(keys.job_deliveries(batch["id"]), delivery_id)
    pipe.lpush(keys.WEBHOOK_WAKE, delivery_id)
    pipe.ltrim(keys.WEBHOOK_WAKE, 0, 0)
    return delivery_id


class DeliveryNotFound(LookupError):
    pass


class NotFailed(Exception):
    """A redelivery of a delivery that is pending or delivered."""


def _text(h: dict[bytes, bytes] | list[bytes]) -> dict[str, str]:
    if isinstance(h, dict):
        return {k.decode(): v.decode() for k, v in h.items()}
    return {h[i].decode(): h[i + 1].decode() for i in range(0, len(h), 2)}


class Claim:
    """A delivery claimed by one sender: the delivery and the token that lets it settle it."""

    def __init__(self, delivery: Delivery, token: str):
        self.delivery, self.token = delivery, token


class Deliveries:
    def __init__(self, redis: Any):
        self.redis = redis
        self._claim = Script(redis, "webhook_claim")
        self._settle = Script(redis, "webhook_settle")
        self._redeliver = Script(redis, "webhook_redeliver")

    # ------------------------------------------------------------------ the sender's side

    async def claim(self, *, limit: int, lease_ms: int) -> list[Claim]:
        """The deliveries due now, at most ``limit``, each held for ``lease_ms``."""
        token = secrets.token_hex(8)
        flat = await self._claim(
            due=keys.WEBHOOK_DUE, prefix=keys.DELIVERY_PREFIX, token=token, lease_ms=lease_ms, limit=limit
        )
        return [Claim(delivery_of_hash(_text(flat[i + 1])), token) for i in range(0, len(flat), 2)]

    async def settle(
        self,
        claim: Claim,
        outcome: Literal["delivered", "retry", "dead"],
        attempt: Attempt,
        *,
        delay_ms: int = 0,
        give_up_ms: int = 0,
        keep_s: int = 7 * 86400,
    ) -> str:
        """Record an attempt; returns the delivery's new status ('' when another claim holds it now)."""
        d = claim.delivery
        status = await self._settle(
            delivery=keys.delivery(d.id),
            attempts=keys.delivery_attempts(d.id),
            due=keys.WEBHOOK_DUE,
            dead=keys.dead_deliveries(d.tenant),
            job_deliveries=keys.job_deliveries(d.job_id),
            id=d.id,
            token=claim.token,
            outcome=outcome,
            attempt=attempt.model_dump_json(),
            delay_ms=delay_ms,
            give_up_ms=give_up_ms,
            reason=attempt.error or "",
            keep_s=keep_s,
        )
        return status.decode() if isinstance(status, bytes) else str(status)

    async def next_due_ms(self) -> int | None:
        """When the earliest delivery comes due (ms, Redis's clock), or None when none waits."""
        first = await self.redis.zrange(keys.WEBHOOK_DUE, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    async def redis_now_ms(self) -> int:
        sec, usec = await self.redis.time()
        return int(sec) * 1000 + int(usec) // 1000

    async def wait_for_new(self, timeout_s: float) -> None:
        """Returns when a delivery is recorded (or redelivered), or after ``timeout_s``."""
        await self.redis.blpop([keys.WEBHOOK_WAKE], timeout=max(timeout_s, 0.01))

    async def backlog(self) -> int:
        return int(await self.redis.zcard(keys.WEBHOOK_DUE))

    # ------------------------------------------------------------------ reading and redelivering

    async def get(self, delivery_id: str, tenant: str | None = None, *, history: bool = True) -> Delivery:
        """One delivery (with its attempts); raises DeliveryNotFound, also for another tenant's."""
        h = _text(await self.redis.hgetall(keys.delivery(delivery_id)))
        if not h or (tenant is not None and h.get("tenant") != tenant):
            raise DeliveryNotFound(delivery_id)
        d = delivery_of_hash(h)
        if history:
            raw = await self.redis.lrange(keys.delivery_attempts(delivery_id), 0, -1)
            d.history = [Attempt.model_validate_json(a) for a in raw]
        return d

    async def _many(self, ids: list[bytes], tenant: str, history: bool) -> list[Delivery]:
        out = []
        for raw in ids:
            try:
                out.append(await self.get(raw.decode(), tenant, history=history))
            except DeliveryNotFound:
                continue  # expired since it was listed
        return out

    async def of_job(self, job_id: str, tenant: str) -> list[Delivery]:
        """The job's delivery log, oldest first, each with its attempts."""
        ids = await self.redis.lrange(keys.job_deliveries(job_id), 0, -1)
        return await self._many(ids, tenant, history=True)

    async def failed(self, tenant: str, limit: int = 100) -> list[Delivery]:
        """The tenant's dead-letter list, most recent first."""
        ids = await self.redis.zrevrange(keys.dead_deliveries(tenant), 0, limit - 1)
        return await self._many(ids, tenant, history=False)

    async def redeliver(self, delivery_id: str, tenant: str) -> Delivery:
        """Send a failed delivery again (same id). Raises DeliveryNotFound or NotFailed."""
        code = await self._redeliver(
            delivery=keys.delivery(delivery_id),
            attempts=keys.delivery_attempts(delivery_id),
            due=keys.WEBHOOK_DUE,
            dead=keys.dead_deliveries(tenant),
            wake=keys.WEBHOOK_WAKE,
            id=delivery_id,
            tenant=tenant,
        )
        if code == 0:
            raise DeliveryNotFound(delivery_id)
        if code == -1:
            raise NotFailed(delivery_id)
        return await self.get(delivery_id, tenant, history=False)
