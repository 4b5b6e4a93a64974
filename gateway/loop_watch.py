"""How long the gateway's event loop was kept from running: the wait every request, stream and
probe on this process sat through at that moment, whatever held it (a parse on the loop, the GIL
held by another thread, the process descheduled on a busy host).

A task asks to wake every ``interval_s`` and counts how late it woke: Node's and uvloop users'
"event-loop lag". /metrics shows the lateness as the histogram ``toolq_gateway_loop_lag_seconds``
(its buckets read before and after a spell give the stalls of that spell: tests/support/loop_lag.py);
a lateness past ``warn_s`` is logged, so a stall in production names its moment.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from prometheus_client import CollectorRegistry, Histogram

log = structlog.get_logger("toolq.gateway")

_LAG = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 10)


class LoopWatch:
    def __init__(self, registry: CollectorRegistry, *, interval_s: float = 0.02, warn_s: float = 0.25):
        self.interval_s, self.warn_s = interval_s, warn_s
        self.lag = Histogram(
            "toolq_gateway_loop_lag_seconds",
            "How late this gateway's event loop woke for a timer: the stall requests waited through",
            buckets=_LAG,
            registry=registry,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.interval_s)
            late = max(0.0, loop.time() - asked - self.interval_s)
            self.lag.observe(late)
            if late > self.warn_s:
                log.warning("the event loop stalled", stalled_ms=round(late * 1000))
