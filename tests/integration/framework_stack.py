"""A gateway and a worker on a private Redis, for the tests that run a framework's own tool loop
against toolq (tests/e2e/test_frameworks*.py, tests/integration/test_frameworks_scripted.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway, private_redis
from tests.support.workers import WorkerProcess

KEY = "frameworks-key"


@dataclass
class Stack:
    base_url: str  # ends in /v1, as every OpenAI client takes it
    model: str
    key: str = KEY


@contextlib.contextmanager
def live_stack(model: str, *, script: str | None = None) -> Iterator[Stack]:
    """A worker (the bundled model, or the scripted engine reading ``script``) and a gateway."""
    with private_redis() as url:
        worker = WorkerProcess(url, script=script, name=model, tools=("worker.demo_tools",)).wait_ready(120)
        gw = LiveGateway(GatewaySettings(redis_url=url, api_keys={KEY: "frameworks"}, fleet_cache_s=0)).start()
        try:
            yield Stack(base_url=gw.url + "/v1", model=model)
        finally:
            gw.stop()
            worker.stop()
