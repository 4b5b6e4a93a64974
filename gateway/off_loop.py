"""A request's CPU-heavy checks never run on the gateway's event loop.

One loop serves every tenant's requests, event streams and ``/healthz``: a request that holds it
holds them all. What a request may cost is bounded (toolq/wire/schema_bounds.py, toolq/wire/nesting.py), but
a bounded request can still ask for a second of jsonschema's metaschema checks. So a request whose
tools carry more than ``INLINE_OBJECTS`` schema objects is checked in the gateway's check process
(gateway/check_process.py, which says why a thread was not enough), and the loop then builds the
model without repeating the checks. A batch's input file is read in a process of its own
(gateway/check_process.py, ``in_file_process``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from gateway.check_process import in_check_process
from toolq.wire.protocol import STORED, tool_schemas
from toolq.wire.schema_bounds import SchemaTooLarge, check_request_subschemas, count_objects

__all__ = ["INLINE_OBJECTS", "problems", "validated"]

M = TypeVar("M", bound=BaseModel)

INLINE_OBJECTS = 64  # schema objects a request's tools may hold and still be checked on the loop


def problems(model: type[BaseModel], data: dict[str, Any]) -> list[Any] | None:
    """What is wrong with ``data`` as ``model`` (pydantic's errors), or None. Run in the check
    process: the verdict crosses back, not the model."""
    try:
        model.model_validate(data)
    except ValidationError as e:
        return e.errors(include_url=False, include_input=False)
    return None


async def validated(model: type[M], data: Any) -> M:
    """The body ``data`` validated as ``model``: first the bound on all its tools' schemas together,
    then the model, off the loop when those schemas are large. A ValidationError becomes FastAPI's
    RequestValidationError, so the answer is the 422 (or on OpenAI's paths the 400) that a body
    validated by FastAPI itself gets (gateway/errors.py)."""
    if not isinstance(data, dict):
        # what FastAPI says of a body that is not a JSON object
        raise RequestValidationError(
            [{"type": "model_attributes_type", "loc": ("body",), "msg": "Input should be an object", "input": None}]
        )
    schemas = tool_schemas(data.get("tools"))
    try:
        check_request_subschemas(schemas)
    except SchemaTooLarge as e:
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "tools"), "msg": str(e)}]) from None
    errors: list[Any]
    try:
        if count_objects(schemas, INLINE_OBJECTS + 1) > INLINE_OBJECTS:
            found = await in_check_process(problems, model, data)
            if found is None:
                return model.model_validate(data, context=STORED)  # checked: only the model is built
            errors = found
        else:
            return model.model_validate(data)
    except ValidationError as e:
        errors = list(e.errors(include_url=False, include_input=False))
    raise RequestValidationError([{**err, "loc": ("body", *err["loc"])} for err in errors]) from None
