"""/v1/tools and /v1/models: what the live workers offer right now."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path

from gateway.auth import current_tenant
from gateway.state import State
from toolq.errors import NotFound
from toolq.wire.api import ErrorBody, ModelsView, ModelView, ToolsView

router = APIRouter(prefix="/v1", tags=["catalog"], dependencies=[Depends(current_tenant)])
_ERRORS: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody}}


@router.get("/tools", response_model=ToolsView, responses=_ERRORS)
async def list_tools(state: State) -> ToolsView:
    """Every tool a live model serves, as an OpenAI function spec, with the models that serve it."""
    return ToolsView(tools=(await state.fleet.get()).tool_specs())


@router.get("/models", response_model=ModelsView, responses=_ERRORS)
async def list_models(state: State) -> ModelsView:
    """The models live workers serve, in OpenAI's list shape (``object``, ``data``), each with its
    workers, queue depth and tools."""
    fleet = await state.fleet.get()
    return ModelsView(data=await fleet.describe(state.store.redis, fleet.models()))


@router.get("/models/{model}", response_model=ModelView, responses={404: {"model": ErrorBody}, **_ERRORS})
async def get_model(model: Annotated[str, Path(min_length=1, max_length=256)], state: State) -> ModelView:
    """One served model. Its ``queue_depth`` is what the KEDA ScaledObject scales workers on."""
    fleet = await state.fleet.get()
    if model not in fleet.models():
        raise NotFound(f"model {model!r} is not served by any live worker", field="model")
    return (await fleet.describe(state.store.redis, [model]))[0]
