"""/healthz (the process answers), /readyz (it can do work) and /metrics (Prometheus).

They need no API key: probes and scrapers do not have one, and none of them shows a job or a
tenant. An operator key (``TOOLQ_OPERATOR_KEYS``, as ``Authorization: Bearer`` or ``X-API-Key``)
adds /metrics' per-tenant series (tenant names and usage); a tenant's API key sees the fleet-wide
ones only; a key that is neither is a 401 and counts as a wrong key (gateway/wrong_keys.py). With
no API keys configured (open access) every caller is an operator, as on the dashboard.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.auth import KeyRing, invalid_key, presented_key
from gateway.key_digest import key_digest
from gateway.state import State
from store.errors import RedisError
from toolq.wire.api import Readiness

router = APIRouter(tags=["health"])
READY_TIMEOUT_S = 1.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(state: State) -> Readiness | JSONResponse:
    """Ready when Redis answers and a worker is live or a model is declared (it takes jobs with no
    worker); 503 with the reason otherwise."""
    try:
        # Bounded: the client retries through Redis blips for seconds, a probe wants an answer now.
        await asyncio.wait_for(state.store.ping(), READY_TIMEOUT_S)
        fleet = await asyncio.wait_for(state.fleet.get(), READY_TIMEOUT_S)
    except (RedisError, OSError, asyncio.TimeoutError) as e:
        why = str(e) or "no answer in time"
        body = Readiness(ready=False, redis=False, workers=0, reason=f"Redis is unreachable: {why}")
        return JSONResponse(body.model_dump(), status_code=503)
    if not fleet.workers and not fleet.declared:  # a declared model takes jobs with no worker
        body = Readiness(ready=False, redis=True, workers=0, reason="no live worker is registered")
        return JSONResponse(body.model_dump(), status_code=503)
    return Readiness(ready=True, redis=True, workers=len(fleet.workers))


async def sees_tenants(request: Request, state: State) -> bool:
    """Whether the caller may see per-tenant figures: an operator key, or open access."""
    ring: KeyRing = request.app.state.keyring
    if ring.open:
        return True
    key = presented_key(request)
    if key is None:
        return False
    digest = key_digest(key)
    known = await state.wrong_keys.judge(
        request, key, lambda: True if ring.is_operator(digest) or ring.tenant_of_digest(digest) else None
    )
    if known is None:
        raise invalid_key()
    return ring.is_operator(digest)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request, state: State) -> Response:
    tenants = await sees_tenants(request, state)
    body = await state.metrics.render(state.store.redis, await state.fleet.get(), tenants=tenants)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
