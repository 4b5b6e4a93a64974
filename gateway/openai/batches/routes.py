"""OpenAI's Batch API: ``POST /v1/batches``, ``GET /v1/batches/{id}``, ``GET /v1/batches`` and
``POST /v1/batches/{id}/cancel``. A batch is created from an uploaded file of request lines,
checked line by line at once (gateway/openai/batches/lines.py): a file with a bad line makes a
``failed`` batch whose ``errors`` name each bad line, as OpenAI's validation does. A good one is
``in_progress`` and run in the fleet's spare capacity (gateway/openai/batches/runner.py).
Another tenant's batch is simply not found.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.auth import Tenant
from gateway.check_process import in_file_process
from gateway.openai.batches.announce import webhook_of
from gateway.openai.batches.lines import ENDPOINTS, stored_lines
from gateway.openai.errors import OpenAIError
from gateway.openai.shared import error_responses
from gateway.state import State

router = APIRouter(prefix="/v1/batches", tags=["openai"])
_ERRORS = error_responses(400, 401, 404)

BatchId = Annotated[str, Path(min_length=1, max_length=64)]


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1, max_length=64)
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if v not in ENDPOINTS:
            raise ValueError(f"endpoint {v!r} is not supported: use one of {', '.join(ENDPOINTS)}")
        return v

    @field_validator("completion_window")
    @classmethod
    def _window(cls, v: str) -> str:
        if v != "24h":
            raise ValueError(f"completion_window {v!r} is not supported: only '24h' is")
        return v

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None:
            if len(v) > 16:
                raise ValueError(f"metadata has {len(v)} pairs, above the limit of 16")
            for k, val in v.items():
                if len(k) > 64 or len(val) > 512:
                    raise ValueError("a metadata key is at most 64 characters and a value at most 512")
        return v


def _not_found(batch_id: str) -> OpenAIError:
    return OpenAIError(404, f"No batch found with id {batch_id!r}.", param="batch_id", code="not_found")


@router.post("", responses=_ERRORS)
async def create_batch(body: BatchCreate, tenant: Tenant, state: State) -> dict[str, Any]:
    stored = await state.files.get(tenant, body.input_file_id)
    content = await state.files.content(tenant, body.input_file_id) if stored else None
    if stored is None or content is None:
        raise OpenAIError(404, f"No such File object: {body.input_file_id}", param="input_file_id", code="not_found")
    if stored.purpose != "batch":
        raise OpenAIError(400, f"file {stored.id} has purpose {stored.purpose!r}, not 'batch'", param="input_file_id")
    # seconds of checks for a large file: in a process of their own, off the loop's GIL
    lines, errors = await in_file_process(stored_lines, content, body.endpoint, state.settings.batch_max_lines)
    batch_id = await state.batches.create(
        tenant,
        endpoint=body.endpoint,
        input_file_id=stored.id,
        window_s=state.settings.batch_window_s,
        metadata=body.metadata,
        lines=lines,
        errors=errors,
        webhook_url=webhook_of(state, tenant),
    )
    if not errors:  # a failed one was announced as it was written (store/batches.py)
        state.observer.batch_wake.set()  # this gateway's runner takes it now, not a tick later
    view = await state.batches.view(batch_id, tenant)
    assert view is not None
    return view


@router.get("/{batch_id}", responses=_ERRORS)
async def retrieve_batch(batch_id: BatchId, tenant: Tenant, state: State) -> dict[str, Any]:
    view = await state.batches.view(batch_id, tenant)
    if view is None:
        raise _not_found(batch_id)
    return view


@router.get("", responses=_ERRORS)
async def list_batches(
    tenant: Tenant,
    state: State,
    after: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    data, more = await state.batches.of_tenant(tenant, after=after, limit=limit)
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": more,
    }


@router.post("/{batch_id}/cancel", responses=_ERRORS)
async def cancel_batch(batch_id: BatchId, tenant: Tenant, state: State) -> dict[str, Any]:
    """``cancelling`` until the lines in flight have stopped, then ``cancelled``: the lines answered
    before are kept in the output file, the others are ``batch_cancelled`` in the error file."""
    rec = await state.batches.record(batch_id, tenant)
    if rec is None:
        raise _not_found(batch_id)
    if rec["status"] in ("validating", "in_progress"):
        await state.batches.request_cancel(batch_id)
    elif rec["status"] != "cancelling":
        raise OpenAIError(409, f"batch {batch_id} is {rec['status']} and cannot be cancelled", code="conflict")
    view = await state.batches.view(batch_id, tenant)
    assert view is not None
    return view
