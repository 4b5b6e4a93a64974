"""The caller's side of a tool service: send one call and wait for its result, never past its
timeout. A worker calls service tools through this (worker/sources/services.py).

Waiting is a BLPOP on the call's own reply key: the result script pushes the outcome there, so the
caller wakes the moment it is accepted, with no polling and no shared reader to route replies
through. (Pipelining the BLPOP behind the send saved nothing measurable here: bench/bench_tools.py.)
"""

from __future__ import annotations

import json
import time
from typing import Any

from store.errors import RedisError
from store.services import ServiceFleetView
from store.tool_calls import CallSender
from toolq.services.calls import decode_outcome
from toolq.tools import ToolOutcome
from toolq.tracing import current_carrier

__all__ = ["ServiceCaller"]

# Beyond the call's timeout, how long the caller waits for the answer to travel back: a service
# enforces the same timeout on the tool, and its "timed out" text should win over ours.
TRANSIT_S = 1.0


class ServiceCaller:
    def __init__(self, redis: Any, services: ServiceFleetView | None = None):
        self.services = services or ServiceFleetView(redis)
        self.sender = CallSender(redis)

    async def call(self, tool: str, call_id: str, arguments: dict[str, Any], timeout_s: float) -> ToolOutcome:
        """Run ``tool`` on a live instance. Never raises but asyncio.CancelledError: no live
        instance, no answer in time and a Redis failure are each a failed outcome saying so."""
        started = time.perf_counter()

        def failed(text: str) -> ToolOutcome:
            return ToolOutcome(ok=False, content=text, error=text, duration_ms=(time.perf_counter() - started) * 1000)

        try:
            if not (await self.services.get()).serves(tool):
                return failed(f"no live tool service serves {tool!r}; the call was not sent")
            trace = current_carrier()  # the caller's span, continued by the service (toolq/services/service.py)
            stored = await self.sender.send(
                tool,
                call_id,
                json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
                int(timeout_s * 1000),
                trace=trace,
            )
            if stored is None:
                stored = await self.sender.reply(tool, call_id, timeout_s + TRANSIT_S)
                if stored is None:
                    return failed(f"tool service {tool!r} did not answer within {timeout_s:g} s")
        except RedisError as e:
            return failed(f"tool service {tool!r} could not be reached: {type(e).__name__}: {e}")
        return decode_outcome(tool, stored, (time.perf_counter() - started) * 1000)
