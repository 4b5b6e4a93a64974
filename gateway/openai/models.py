"""The model a request names, checked against the live workers the way OpenAI answers a model it
does not have: 404 ``model_not_found``."""

from __future__ import annotations

from gateway.openai.errors import OpenAIError
from gateway.state import GatewayState


async def check_model(state: GatewayState, model: str) -> None:
    served = (await state.fleet.get()).models()
    if served and model not in served:
        raise OpenAIError(
            404,
            f"The model {model!r} does not exist or no live worker serves it; served: {', '.join(served)}",
            param="model",
            code="model_not_found",
        )
