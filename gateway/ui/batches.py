"""The dashboard's batches (/ui/api/batches): each batch's progress and counts, and its lines with
a link to each line's job. A tenant sees its own batches; an operator sees a tenant's when it names
one, else every active batch."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query

from gateway.state import State
from gateway.ui.access import tenant_scope
from gateway.ui.session import ViewerDep
from toolq.errors import NotFound

router = APIRouter(prefix="/ui/api/batches", tags=["dashboard"], include_in_schema=False)

MAX_LINES = 200  # lines shown on a batch's page


@router.get("")
async def batches(
    viewer: ViewerDep, state: State, tenant: Annotated[str | None, Query(max_length=128)] = None
) -> list[dict[str, Any]]:
    scope = tenant_scope(viewer, tenant)
    if scope is not None:
        return (await state.batches.of_tenant(scope, after=None, limit=100))[0]
    views = [await state.batches.view(b) for b in await state.batches.active()]
    return [v for v in views if v is not None]


@router.get("/{batch_id}")
async def batch(batch_id: str, viewer: ViewerDep, state: State) -> dict[str, Any]:
    view = await state.batches.view(batch_id, viewer.tenant)
    if view is None:
        raise NotFound(f"no batch {batch_id!r}", field="batch_id")
    out, err = await state.batches.outputs(batch_id)
    lines = []
    for raw, ok in [*((x, True) for x in out), *((x, False) for x in err)][:MAX_LINES]:
        d = json.loads(raw)
        resp = d.get("response") or {}
        code = (d.get("error") or {}).get("code")
        lines.append({"custom_id": d["custom_id"], "job_id": resp.get("request_id"), "ok": ok, "code": code})
    for index, job_id in sorted((await state.batches.in_flight(batch_id)).items())[: max(0, MAX_LINES - len(lines))]:
        lines.append({"custom_id": f"line {index + 1}", "job_id": job_id, "ok": None, "code": "running"})
    return {"batch": view, "lines": lines}
