"""A request's CPU-heavy checks run in threads of their own, never on the gateway's event loop.

One loop serves every tenant's requests, event streams and ``/healthz``: a request that holds it
holds them all. What a request may cost is bounded (toolq/schema_bounds.py, toolq/nesting.py), but
a bounded request can still ask for a second of jsonschema's metaschema checks. So a request whose
tools carry more than ``INLINE_OBJECTS`` schema objects is validated here, in a small pool that
nothing else uses (the loop's default pool serves the store's and the followers' work); the loop
only waits for it, and a few heavy requests at once wait for each other, not the loop. Threads
share the GIL, but pure-Python work gives it up every few milliseconds, and the C steps of a body's
depth scan (gateway/json_door.py) hold it for tens of milliseconds at most.

On Linux the pool's thread also runs at a lower CPU priority (``NICE``, per thread): a tenant's
second of checks then yields the core to the loop and to whatever shares the host. On a two-core
host with a worker beside the gateway, four such requests had halved the worker's decode rate for
every tenant's jobs (tests/e2e/test_slow_builds.py: tenant B 3.9x its quiet time, 1.04-1.16x with the
checks yielding).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from toolq.protocol import tool_schemas
from toolq.schema_bounds import SchemaTooLarge, check_request_subschemas, count_objects

__all__ = ["INLINE_OBJECTS", "off_loop", "validated"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

INLINE_OBJECTS = 64  # schema objects a request's tools may hold and still be checked on the loop
NICE = 19  # the checks' thread yields the CPU to the loop and to the host's other processes (10 left 1.4x)


def _yield_cpu() -> None:
    if sys.platform == "linux":  # where a nice value belongs to the thread, not the process
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)


# one thread: heavy requests wait for each other, and only one competes with the loop for the GIL
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolq-request-checks", initializer=_yield_cpu)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the request-check pool."""
    return await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)


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
    try:
        if count_objects(schemas, INLINE_OBJECTS + 1) > INLINE_OBJECTS:
            return await off_loop(model.model_validate, data)
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])} for err in errors]) from None
