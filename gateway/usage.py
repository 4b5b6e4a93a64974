"""GET /v1/usage: the caller's own tenant's token use, jobs and policy."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.auth import Tenant
from gateway.state import State
from store import byte_quota
from store.fair import FairQueue
from store.usage import read_usage
from toolq.tenants import policy_of
from toolq.wire.api import ErrorBody, UsageView

router = APIRouter(prefix="/v1", tags=["usage"])
_ERRORS: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody}}


@router.get("/usage", response_model=UsageView, responses=_ERRORS)
async def usage(tenant: Tenant, state: State) -> UsageView:
    """Tokens the tenant's ended jobs used (this minute, today, in all), its jobs waiting,
    running and started, the bytes it keeps in the job store, and the policy it runs under."""
    redis = state.store.redis
    used = await read_usage(redis, tenant)
    fair = FairQueue(redis)
    fleet = await state.fleet.get()
    waiting = 0
    for model in fleet.models():
        waiting += (await fair.waiting(model)).get(tenant, 0)
    running = (await fair.running([tenant])).get(tenant, 0)
    started = (await fair.started()).get(tenant, 0)
    policy = policy_of(state.settings.tenants, tenant)
    return UsageView(
        store_bytes_used=await byte_quota.held(redis, tenant),
        tenant=tenant,
        tokens_this_minute=used.minute_tokens,
        tokens_today=used.day_tokens,
        tokens=used.tokens,
        prompt_tokens=used.prompt_tokens,
        completion_tokens=used.completion_tokens,
        jobs=used.jobs,
        waiting=waiting,
        running=running,
        started=started,
        **policy.model_dump(exclude={"store_bytes"}),
        store_bytes=state.store.bounds.byte_quota(tenant),
    )
