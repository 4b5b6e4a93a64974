"""The FastAPI application: ``create_app(settings)`` wires settings, Redis, routes and metrics."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI

from gateway import actions, catalog, check_process, deliveries, errors, health, jobs, threads, ui, usage
from gateway.auth import KeyRing
from gateway.browser_guard import BrowserGuard, served_hosts
from gateway.fleet import FleetView
from gateway.followers import Seats
from gateway.json_door import JsonDepthLimit
from gateway.limits import BodySizeLimit
from gateway.loop_watch import LoopWatch
from gateway.metrics import EventObserver, GatewayMetrics
from gateway.openai import conversations as openai_conversations
from gateway.openai import errors as openai_errors
from gateway.openai import files as openai_files
from gateway.openai.batches import routes as openai_batches
from gateway.openai.batches.runner import BatchRunner, RunnerSettings
from gateway.openai.chat import routes as openai_chat
from gateway.openai.responses import routes as openai_responses
from gateway.settings import GatewaySettings
from gateway.state import GatewayState
from gateway.tracing import TraceContext
from gateway.wrong_keys import WrongKeys
from store.admission import QueueBounds
from store.batches import BatchStore
from store.errors import RedisError
from store.event_hub import EventHub
from store.files import FileLimits, FileStore
from store.fleet import Fleet
from store.jobstore import JobNotFound, JobStore, connect
from toolq.tracing import on as tracing_on
from toolq.webhooks.settings import WebhookSettings
from toolq.wire.protocol import PROTOCOL_VERSION

log = structlog.get_logger("toolq.gateway")

# the modules of the models whose large requests are checked in the check process
# (gateway/off_loop.py): imported there when the gateway starts (RunRequest lives in thread_api,
# which, unlike gateway.threads, pulls in no routes)
CHECKED_MODELS = (
    "toolq.wire.protocol",
    "toolq.wire.thread_api",
    "gateway.openai.chat.request",
    "gateway.openai.responses.request",
)


def warn_if_open(settings: GatewaySettings) -> None:
    if settings.open_access:
        log.warning(
            "NO API KEYS CONFIGURED: every caller can submit, read and cancel every job. "
            "Set TOOLQ_API_KEYS=key:tenant,... before exposing this gateway.",
            bind=settings.bind_host(),
        )


def _fastapi_telemetry() -> dict[str, Any]:
    """FastAPI releases with built-in telemetry trace every request once a tracer provider is
    installed (toolq/tracing/setup.py). Off here: its HTTP span cost about 0.75 ms of CPU per
    request on the benchmark machine (the route matched again for each span), more than all of
    toolq's spans of a job together (bench/bench_gateway.py, section 2). toolq's ``submit``
    span is the gateway's server span, under the caller's context (gateway/tracing.py)."""
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    return {}


def create_app(settings: GatewaySettings | None = None, webhooks: WebhookSettings | None = None) -> FastAPI:
    settings = settings or GatewaySettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warn_if_open(settings)
        store = JobStore(
            connect(settings.redis_url),
            fair=settings.fair_share,
            affinity_wait_ms=settings.affinity_wait_ms,
            # every door's submissions pass these in the store's scripts (store/admission.py)
            bounds=QueueBounds(settings.max_queue_depth, settings.tenants, settings.tenant_store_bytes),
        )
        metrics = GatewayMetrics()

        def on_refresh(fleet: Fleet) -> None:
            metrics.known_tools = frozenset(n for w in fleet.workers for n in w.tool_names)

        async def model_of(job_id: str) -> str | None:
            try:
                return (await store.record(job_id)).model
            except JobNotFound:
                return None

        observer = EventObserver(store.redis, metrics, model_of)
        hub = EventHub(store, queue_size=settings.follower_queue, reads=settings.follower_reads)
        app.state.toolq = GatewayState(
            settings=settings,
            store=store,
            fleet=FleetView(store.redis, settings.fleet_cache_s, on_refresh, settings.declared_models),
            metrics=metrics,
            observer=observer,
            wrong_keys=WrongKeys(store.redis, settings.wrong_key_limit, settings.wrong_key_window_s),
            hub=hub,
            seats=Seats(settings.max_followers_per_tenant, settings.retry_after_s),
            webhooks=webhooks or WebhookSettings(),
            files=FileStore(
                store.redis,
                FileLimits(settings.max_file_bytes, settings.max_files, settings.file_ttl_s),
                store.bounds,
            ),
            batches=BatchStore(store.redis),
        )
        runner = BatchRunner(
            app.state.toolq,
            app.state.toolq.batches,
            app.state.toolq.files,
            RunnerSettings(max_in_flight=settings.batch_max_in_flight, headroom_slots=settings.batch_headroom_slots),
        )
        loop_watch = LoopWatch(metrics.registry)
        loop_watch.start()
        observer.start()
        hub.start()
        runner.start()
        warming = [
            asyncio.ensure_future(check_process.warm(CHECKED_MODELS)),
            asyncio.ensure_future(check_process.warm_files()),
        ]
        try:
            # Start serving once subscribed, so the events of the first jobs are counted too; a
            # Redis that is down at startup must not keep the gateway from starting, though.
            await asyncio.wait_for(observer.subscribed.wait(), 2.0)
            await asyncio.wait_for(hub.connected.wait(), 2.0)
            # Learn the served tool names now: metrics label only those (see GatewayMetrics).
            await asyncio.wait_for(app.state.toolq.fleet.get(), 2.0)
        except (asyncio.TimeoutError, RedisError, OSError):
            log.warning("Redis not answering at startup; metrics and routes will start when it does")
        try:
            yield
        finally:
            for w in warming:
                w.cancel()
            await loop_watch.stop()
            await runner.stop()
            await hub.stop()
            await observer.stop()
            await store.close()

    app = FastAPI(
        **_fastapi_telemetry(),
        title="toolq gateway",
        version=str(PROTOCOL_VERSION),
        description="Submit tool-calling LLM conversations as jobs, follow their events, fetch their results.",
        lifespan=lifespan,
    )
    app.state.keyring = KeyRing(settings.api_keys, settings.operator_keys)
    app.state.settings = settings
    errors.install(app)
    openai_errors.install(app)  # after errors.install: it wraps those handlers for the OpenAI paths
    app.include_router(jobs.router)
    app.include_router(actions.router)
    app.include_router(deliveries.router)
    app.include_router(threads.router)
    app.include_router(openai_chat.router)
    app.include_router(openai_responses.router)
    app.include_router(openai_conversations.router)
    app.include_router(openai_files.router)
    app.include_router(openai_batches.router)
    app.include_router(catalog.router)
    app.include_router(health.router)
    app.include_router(usage.router)
    ui.install(app, settings, app.state.keyring)
    app.add_middleware(JsonDepthLimit)  # added first, so it runs inside BodySizeLimit, on a read body
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        drain_bytes=settings.body_drain_bytes,
        file_bytes=settings.max_file_bytes,
    )
    hosts = served_hosts(settings)
    if hosts is not None or settings.open_access:  # added after: it runs before the body is read
        app.add_middleware(BrowserGuard, hosts=hosts, open_access=settings.open_access)
    if tracing_on():  # configured by gateway/main.py; off, the request path has no tracing code
        app.add_middleware(TraceContext)
    return app
