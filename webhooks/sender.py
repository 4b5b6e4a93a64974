"""The sender's loop: claim what is due, send each in a task of its own, settle each attempt.

At least once: a delivery is claimed under a lease (``lease_s``) and settled only after its
attempt, so a sender killed in between loses nothing: the delivery comes due again when the lease
ends and is sent again with the same ``webhook-id``. Several senders may run side by side; a
claim is held by one at a time. The loop sleeps on a wake list that every new delivery pushes, so
a delivery starts at once, and otherwise wakes for the next retry that comes due.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import structlog

from store.deliveries import Claim, Deliveries
from store.errors import RedisError
from toolq.webhooks.deliveries import Attempt
from toolq.webhooks.urls import Resolver
from webhooks import metrics
from webhooks.attempt import attempt
from webhooks.backoff import retry_delay_s
from webhooks.settings import SenderSettings

log = structlog.get_logger("toolq.webhooks")

IDLE_WAIT_S = 1.0  # the longest sleep between looks at the due set


class Sender:
    def __init__(
        self,
        settings: SenderSettings,
        deliveries: Deliveries,
        client: httpx.AsyncClient | None = None,
        resolver: Resolver | None = None,
    ):
        self.settings = settings
        self.deliveries = deliveries
        # No redirects, no proxies from the environment: the connection goes to the checked address.
        self.client = client or httpx.AsyncClient(follow_redirects=False, trust_env=False)
        self.resolver = resolver
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        while not stop.is_set():
            try:
                free = s.concurrency - len(self.tasks)
                claims = await self.deliveries.claim(limit=free, lease_ms=int(s.lease_s * 1000)) if free else []
                for c in claims:
                    task = asyncio.ensure_future(self.deliver(c))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                metrics.BACKLOG.set(await self.deliveries.backlog())
                if claims and len(claims) == free:
                    continue  # more may be due
                if len(self.tasks) >= s.concurrency:
                    await asyncio.wait(self.tasks, timeout=IDLE_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
                    continue
                await self._sleep(stop)
            except (RedisError, OSError) as e:
                log.warning("redis unavailable; retrying", error=str(e))
                await asyncio.sleep(IDLE_WAIT_S)
        await self.drain()

    async def _sleep(self, stop: asyncio.Event) -> None:
        """Until a new delivery is recorded, the next retry is due, or a second has passed."""
        wait = IDLE_WAIT_S
        due = await self.deliveries.next_due_ms()
        if due is not None:
            wait = min(wait, max(0.0, (due - await self.deliveries.redis_now_ms()) / 1000))
        if wait > 0:
            waiter = asyncio.ensure_future(self.deliveries.wait_for_new(wait))
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({waiter, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                stopped.cancel()
            if waiter.done() and not waiter.cancelled():
                waiter.result()  # raises the Redis error it met, if any

    async def drain(self) -> None:
        """On stop: let the attempts in flight finish (up to one timeout); the rest come due again."""
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=self.settings.timeout_s)
            for t in self.tasks:
                t.cancel()
        await self.client.aclose()

    async def deliver(self, claim: Claim) -> None:
        s, d = self.settings, claim.delivery
        started = time.time()
        metrics.IN_FLIGHT.inc()
        try:
            outcome = await attempt(
                self.client,
                d,
                s.secrets.get(d.tenant, []),
                allow_private=s.allow_private,
                timeout_s=s.timeout_s,
                resolver=self.resolver,
            )
        finally:
            metrics.IN_FLIGHT.dec()
        took = time.time() - started
        metrics.ATTEMPT_SECONDS.observe(took)
        record = Attempt(
            at_ms=int(started * 1000),
            duration_ms=int(took * 1000),
            status_code=outcome.status_code,
            error=outcome.error,
        )
        delay_s = 0.0
        if outcome.kind == "retry":
            delay_s = retry_delay_s(
                d.attempts, first_s=s.first_retry_s, max_s=s.max_retry_s, retry_after_s=outcome.retry_after_s
            )
        try:
            status = await self.deliveries.settle(
                claim,
                outcome.kind,
                record,
                delay_ms=int(delay_s * 1000),
                give_up_ms=int(s.give_up_after_s * 1000),
                keep_s=s.keep_s,
            )
        except (RedisError, OSError) as e:
            # Not settled: the claim's lease ends and the delivery is sent again (at least once).
            log.warning("could not record an attempt", delivery_id=d.id, error=str(e))
            return
        metrics.ATTEMPTS.labels(outcome.kind).inc()
        if status in ("delivered", "failed"):
            metrics.FINISHED.labels(status).inc()
        log.info(
            "webhook attempt",
            delivery_id=d.id,
            job_id=d.job_id,
            attempt=d.attempts,
            result=outcome.kind,
            status=status or "superseded",
            status_code=outcome.status_code,
            error=outcome.error,
            retry_in_s=round(delay_s, 3) if status == "pending" else None,
        )
