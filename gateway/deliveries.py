"""Webhook deliveries, scoped to the caller's tenant: a job's delivery log, one delivery with its
attempts, the dead-letter list, and sending a failed one again (store/deliveries.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel

from gateway.auth import Tenant
from gateway.jobs import JobId
from gateway.state import State
from store.deliveries import Deliveries, DeliveryNotFound, NotFailed
from toolq.errors import Conflict, JobNotFoundError, NotFound
from toolq.webhooks.deliveries import Delivery
from toolq.wire.api import ErrorBody

router = APIRouter(tags=["webhooks"])

DeliveryId = Annotated[
    str,
    Path(min_length=5, max_length=128, pattern=r"^msg_[A-Za-z0-9]+$", description="the delivery's webhook-id"),
]
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 404, 422)}


class DeliveryList(BaseModel):
    object: str = "list"
    data: list[Delivery]


def _not_found(delivery_id: str) -> NotFound:
    return NotFound(f"webhook delivery {delivery_id!r} not found", field="delivery_id", code="delivery_not_found")


@router.get("/v1/jobs/{job_id}/webhooks", response_model=DeliveryList, responses=_ERRORS)
async def job_deliveries(job_id: JobId, tenant: Tenant, state: State) -> DeliveryList:
    """The job's webhook deliveries, oldest first, each with its attempts."""
    found = await Deliveries(state.store.redis).of_job(job_id, tenant)
    if not found and await state.store.owner(job_id) != tenant:  # 404 unless the job is the caller's
        raise JobNotFoundError.of(job_id)
    return DeliveryList(data=found)


@router.get("/v1/webhooks/failed", response_model=DeliveryList, responses=_ERRORS)
async def failed_deliveries(
    tenant: Tenant,
    state: State,
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many, newest first")] = 100,
) -> DeliveryList:
    """The caller's deliveries that never succeeded (the dead-letter list), newest first."""
    return DeliveryList(data=await Deliveries(state.store.redis).failed(tenant, limit))


@router.get("/v1/webhooks/deliveries/{delivery_id}", response_model=Delivery, responses=_ERRORS)
async def get_delivery(delivery_id: DeliveryId, tenant: Tenant, state: State) -> Delivery:
    """One delivery with its attempts."""
    try:
        return await Deliveries(state.store.redis).get(delivery_id, tenant)
    except DeliveryNotFound:
        raise _not_found(delivery_id) from None


@router.post(
    "/v1/webhooks/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=Delivery,
    responses={409: {"model": ErrorBody}, **_ERRORS},
)
async def redeliver(delivery_id: DeliveryId, tenant: Tenant, state: State) -> Delivery:
    """Send a failed delivery again, with the same webhook-id and a fresh retry period."""
    try:
        return await Deliveries(state.store.redis).redeliver(delivery_id, tenant)
    except DeliveryNotFound:
        raise _not_found(delivery_id) from None
    except NotFailed:
        raise Conflict(
            f"webhook delivery {delivery_id!r} has not failed (it is pending or delivered)", field="delivery_id"
        ) from None
