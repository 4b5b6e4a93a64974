"""/healthz (the process answers), /readyz (it can do work) and /metrics (Prometheus).

They carry no API key: probes and scrapers do not have one, and none of them shows a job or a tenant.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import RedisError

from gateway.state import State
from toolq.api import Readiness

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
        await asyncio.wait_for(state.store.redis.ping(), READY_TIMEOUT_S)
        fleet = await asyncio.wait_for(state.fleet.get(), READY_TIMEOUT_S)
    except (RedisError, OSError, asyncio.TimeoutError) as e:
        why = str(e) or "no answer in time"
        body = Readiness(ready=False, redis=False, workers=0, reason=f"Redis is unreachable: {why}")
        return JSONResponse(body.model_dump(), status_code=503)
    if not fleet.workers and not fleet.declared:  # a declared model takes jobs with no worker
        body = Readiness(ready=False, redis=True, workers=0, reason="no live worker is registered")
        return JSONResponse(body.model_dump(), status_code=503)
    return Readiness(ready=True, redis=True, workers=len(fleet.workers))


@router.get("/metrics", response_class=Response)
async def metrics(state: State) -> Response:
    body = await state.metrics.render(state.store.redis, await state.fleet.get())
    return Response(body, media_type=CONTENT_TYPE_LATEST)
