"""Helpers for the gateway tests: a gateway in-process or on a real port, and fake fleet
entries for tests that only need the gateway's view of the fleet. Worker processes come from
tests.support.workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import redis
import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings
from store import keys
from toolq.local import free_port
from toolq.webhooks.settings import WebhookSettings

# One tool call, then an answer once the tool's result is in the prompt. The rule wants the
# newline after the tag: the Hermes system prompt itself mentions "<tool_response></tool_response>".
CALL_ZORBIX = '<tool_call>{"name": "calculate_zorbix", "arguments": {"zorb": 15, "bix": 7}}</tool_call>'
TEST_HOST = "gateway"  # the host name of asgi_client's requests
ZORBIX_RULES = [("<tool_response>\n", "The answer is 22."), ("", CALL_ZORBIX)]


def queued_jobs(redis_url: str, model: str) -> int:
    """Jobs of a model on arq's queue or waiting for their fair turn (store/fair.py)."""
    r = redis.Redis.from_url(redis_url)
    tenants = [t.decode() for t in r.zrange(keys.fair_tenants(model), 0, -1)]
    return int(r.zcard(keys.queue(model))) + sum(int(r.zcard(keys.fair_waiting(model, t))) for t in tenants)


class LiveGateway:
    """The gateway on a real port (uvicorn in a thread): for SSE that must stream, and for tools
    (schemathesis, the CLI) that speak real HTTP."""

    def __init__(self, settings: GatewaySettings, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> LiveGateway:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of its own, for a module's worth of tests sharing one gateway and worker."""
    from tests.support.redis_server import RedisServer

    server = RedisServer()
    server.start()
    try:
        yield server.url + "/0"
    finally:
        server.stop()


@contextlib.contextmanager
def served(
    redis_url: str, settings: GatewaySettings | None = None, ready_s: float = 120, **worker: Any
) -> Iterator[LiveGateway]:
    """A real worker process (``worker``: WorkerProcess's options) and a live gateway on one
    Redis, both stopped afterwards."""
    from tests.support.workers import WorkerProcess

    proc = WorkerProcess(redis_url, **worker).wait_ready(ready_s)
    gw = LiveGateway(settings or GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        yield gw
    finally:
        gw.stop()
        proc.stop()


@contextlib.asynccontextmanager
async def asgi_client(
    settings: GatewaySettings, webhooks: WebhookSettings | None = None, **headers: str
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client wired straight to the app (no socket), with the app's lifespan run. Its
    host name is ``gateway``, which an open gateway is told to serve (gateway/browser_guard.py)."""
    if settings.open_access and not settings.allowed_hosts:
        settings = settings.model_copy(update={"allowed_hosts": [TEST_HOST]})
    app = create_app(settings, webhooks)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{TEST_HOST}", headers=headers) as c:
            c.app = app  # type: ignore[attr-defined]
            yield c


def register_fake_worker(
    redis_url: str, model: str, tools: list[str], *, worker_id: str | None = None, ttl_s: int = 60
) -> str:
    """A fleet entry as a worker writes it, for tests that need only the gateway's view."""
    worker_id = worker_id or f"fake-{model}-{len(tools)}-{time.monotonic_ns()}"
    specs = [
        {"type": "function", "function": {"name": t, "description": t, "parameters": {"type": "object"}}} for t in tools
    ]
    r = redis.Redis.from_url(redis_url)
    try:
        r.hset(
            keys.worker(worker_id),
            mapping={
                "id": worker_id,
                "model": model,
                "gpu": "",
                "tools": json.dumps(specs),
                "heartbeat_ms": 0,
                "busy": 0,
                "jobs_done": 0,
                "max_jobs": 1,
                "host": "test",
                "pid": 0,
            },
        )
        r.expire(keys.worker(worker_id), ttl_s)
        r.sadd(keys.WORKERS, worker_id)
    finally:
        r.close()
    return worker_id


async def wait_for(predicate: Any, timeout: float = 10.0, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(every)
