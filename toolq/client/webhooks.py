"""Webhook deliveries in the SDK (HTTP mode): a job's delivery log, the dead-letter list, one
delivery, and sending a failed one again (gateway/deliveries.py). Receivers verify what they get
with ``toolq.verify_webhook`` (toolq/webhooks/signing.py)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from toolq.client.gateway_only import GatewayCalls
from toolq.webhooks.deliveries import Delivery

T = TypeVar("T")


def _deliveries(body: dict[str, Any]) -> list[Delivery]:
    return [Delivery.model_validate(d) for d in body["data"]]


class WebhookMethods(GatewayCalls):
    """Client's webhook methods."""

    async def job_deliveries(self, job_id: str) -> list[Delivery]:
        """The job's webhook deliveries, oldest first, each with its attempts."""
        return _deliveries(await self._call("GET", f"/v1/jobs/{job_id}/webhooks"))

    async def failed_deliveries(self, limit: int = 100) -> list[Delivery]:
        """This tenant's deliveries that never succeeded (the dead-letter list), newest first."""
        return _deliveries(await self._call("GET", "/v1/webhooks/failed", params={"limit": limit}))

    async def delivery(self, delivery_id: str) -> Delivery:
        """One delivery (its ``id`` is the webhook-id header), with its attempts."""
        return Delivery.model_validate(await self._call("GET", f"/v1/webhooks/deliveries/{delivery_id}"))

    async def redeliver(self, delivery_id: str) -> Delivery:
        """Send a failed delivery again, with the same webhook-id and a fresh retry period."""
        return Delivery.model_validate(await self._call("POST", f"/v1/webhooks/deliveries/{delivery_id}/redeliver"))


class SyncWebhookMethods:
    """SyncClient's webhook methods: the same, blocking."""

    _client: WebhookMethods  # the async Client underneath

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError  # SyncClient's own: runs the coroutine on the client's loop

    def job_deliveries(self, job_id: str) -> list[Delivery]:
        return self._run(self._client.job_deliveries(job_id))

    def failed_deliveries(self, limit: int = 100) -> list[Delivery]:
        return self._run(self._client.failed_deliveries(limit))

    def delivery(self, delivery_id: str) -> Delivery:
        return self._run(self._client.delivery(delivery_id))

    def redeliver(self, delivery_id: str) -> Delivery:
        return self._run(self._client.redeliver(delivery_id))
