"""Prometheus metrics, derived from the events every job publishes on ``toolq:events``.

The gateway subscribes to the all-jobs channel, so the figures cover every job in the system,
including those submitted straight into Redis by the SDK. Each gateway replica therefore reports
the same cluster-wide counts: aggregate replicas with ``max``, not ``sum``. Labels are bounded on
purpose: model, outcome, tool (only names a live worker serves), tenant (the configured API keys'
tenants: the figures per tenant come from Redis, store/fair.py and store/usage.py, so
every replica reports the same; only the 429 counter is this replica's own: aggregate it with
``sum``); never job ids.
Tenant names and usage are only for operators: the per-tenant series live in a registry of their
own (``tenant_registry``) that /metrics renders only for an operator key (gateway/health.py);
everyone else sees the fleet-wide series, the 429s included without a tenant
(``toolq_jobs_refused_total{reason}``).
Pub/sub is fire-and-forget, so a gateway that loses its subscription for a moment misses those
events' figures; the jobs themselves are unaffected.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import ValidationError

from store import byte_quota
from store.errors import RedisError
from store.event_feed import AllEvents
from store.fair import FairQueue
from store.fleet import Fleet
from store.quarantine import quarantined_counts
from store.usage import read_usage
from toolq.wire.payloads import MODELS, FinalData, QueuedData, StartedData, TokenData, ToolCallData, ToolResultData
from toolq.wire.protocol import TERMINAL_EVENTS, EventType

log = structlog.get_logger("toolq.gateway")

_LATENCY = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
_ITERATIONS = (1, 2, 3, 4, 5, 7, 10, 15, 20, 50, 100)
OTHER_TOOL = "_other"  # the label for a tool name no worker serves (a model inventing names)
TRACKED_JOBS = 50_000  # jobs remembered between their queued/started and terminal events


@dataclass
class _Track:
    model: str
    queued_ms: int | None = None
    started_ms: int | None = None
    first_token: bool = False


class GatewayMetrics:
    def __init__(self) -> None:
        # One registry per app: tests build many apps in one process without name clashes.
        self.registry = CollectorRegistry()
        r = self.registry
        self.submitted = Counter("toolq_jobs_submitted", "Jobs submitted", ["model"], registry=r)
        self.finished = Counter(
            "toolq_jobs_finished",
            "Jobs ended, by outcome (succeeded, failed, cancelled)",
            ["model", "outcome"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "toolq_queue_depth", "Jobs in a model's queue (waiting or running)", ["model"], registry=r
        )
        self.workers = Gauge("toolq_workers", "Live workers per model", ["model"], registry=r)
        # OpenAI's Batch API (gateway/openai/batches/): counted by the gateway that ran the batch
        self.batch_lines_fed = Counter(
            "toolq_batch_lines_fed", "Batch lines this gateway fed to the queue as jobs", registry=r
        )
        self.batches_ended = Counter(
            "toolq_batches_ended", "Batches this gateway finalized, by status", ["status"], registry=r
        )
        self.workers_needed = Gauge(
            "toolq_workers_needed",
            "Workers a model's queue fills (not jobs): ceil(queue depth / slots per worker); an autoscaler's target",
            ["model"],
            registry=r,
        )
        # From the workers' fleet entries (worker/heartbeat.py), summed over a model's workers.
        self.slots = Gauge("toolq_slots", "Sequences a model's workers decode together", ["model"], registry=r)
        self.slots_busy = Gauge("toolq_slots_busy", "Of those, sequences generating now", ["model"], registry=r)
        self.batch_size = Gauge(
            "toolq_batch_size",
            "Mean sequences per decode step, last few seconds, averaged over a model's workers",
            ["model"],
            registry=r,
        )
        self.prefill_tps = Gauge(
            "toolq_prefill_tokens_per_second", "Prompt tokens evaluated per second", ["model"], registry=r
        )
        self.decode_tps = Gauge("toolq_decode_tokens_per_second", "Tokens generated per second", ["model"], registry=r)
        self.tool_format = Gauge(
            "toolq_tool_format",
            "Live workers of a model by the tool-call format they parse",
            ["model", "format"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "toolq_queue_wait_seconds", "Submit to first start of a job", ["model"], buckets=_LATENCY, registry=r
        )
        self.ttft = Histogram(
            "toolq_time_to_first_token_seconds",
            "Start to first streamed token (stream_tokens jobs)",
            ["model"],
            buckets=_LATENCY,
            registry=r,
        )
        self.tokens = Counter(
            "toolq_tokens_generated", "Completion tokens generated by finished jobs", ["model"], registry=r
        )
        self.iterations = Histogram(
            "toolq_job_iterations", "Generation rounds per finished job", ["model"], buckets=_ITERATIONS, registry=r
        )
        self.tool_calls = Counter("toolq_tool_calls", "Tool calls the models made", ["tool"], registry=r)
        self.tool_results = Counter("toolq_tool_results", "Tool results, by success", ["tool", "ok"], registry=r)
        self.tool_duration = Histogram(
            "toolq_tool_duration_seconds", "Tool execution time", ["tool"], buckets=_LATENCY, registry=r
        )
        self.events_seen = Counter(
            "toolq_gateway_events_observed", "Job events the gateway's subscriber read", registry=r
        )
        self.refused_any = Counter(
            "toolq_jobs_refused",
            "Submissions answered 429, by reason, all tenants together; this replica's",
            ["reason"],
            registry=r,
        )
        # Per tenant (fair share and budgets): read from Redis at scrape time, but the 429s.
        # Rendered for operators only (see the module's docstring).
        self.tenant_registry = CollectorRegistry()
        t = self.tenant_registry
        self.tenant_waiting = Gauge(
            "toolq_tenant_jobs_waiting", "Jobs waiting for a fair turn", ["tenant", "model"], registry=t
        )
        self.tenant_running = Gauge(
            "toolq_tenant_jobs_running", "Jobs handed to a worker, not ended or paused", ["tenant"], registry=t
        )
        self.tenant_started = Gauge(
            "toolq_tenant_jobs_started",
            "Jobs handed to a worker so far (a counter kept in Redis)",
            ["tenant"],
            registry=t,
        )
        self.tenant_tokens = Gauge(
            "toolq_tenant_tokens",
            "Prompt + completion tokens of ended jobs (a counter kept in Redis)",
            ["tenant"],
            registry=t,
        )
        self.tenant_store_bytes = Gauge(
            "toolq_tenant_store_bytes",
            "Bytes a tenant keeps in Redis, as its quota counts them, by kind (job, thread, file; store/byte_quota.py)",
            ["tenant", "kind"],
            registry=t,
        )
        self.refusals = Counter(
            "toolq_tenant_refusals",
            "Submissions answered 429, by reason (queue_full, tokens_per_minute, tokens_per_day); this replica's",
            ["tenant", "reason"],
            registry=t,
        )
        # Affinity (store/affinity.py): read from Redis and the registry at scrape time.
        self.affinity = Gauge(
            "toolq_affinity_dispatches",
            "Jobs offered first to the worker holding their conversation, by how they were placed "
            "(affinity, fallback_wait, fallback_gone, fallback_full; a counter kept in Redis)",
            ["model", "placed"],
            registry=r,
        )
        # Poison jobs (store/lua/claim.lua): read from Redis at scrape time; no tenant label.
        self.quarantined = Gauge(
            "toolq_jobs_quarantined",
            "Jobs ended worker_lost after too many attempts lost their worker (a counter kept in Redis)",
            ["model"],
            registry=r,
        )
        self.cache_conversations = Gauge(
            "toolq_worker_cache_conversations", "Conversations a worker holds", ["model", "worker"], registry=r
        )
        self.cache_bytes = Gauge(
            "toolq_worker_cache_bytes", "Saved state a worker holds per tier", ["model", "worker", "tier"], registry=r
        )
        self._jobs: OrderedDict[str, _Track] = OrderedDict()
        self._models_seen: set[str] = set()
        self.known_tools: frozenset[str] = frozenset()

    def refused(self, tenant: str, reason: str) -> None:
        self.refusals.labels(tenant, reason).inc()
        self.refused_any.labels(reason).inc()

    async def _tenant_figures(self, redis: Any, models: list[str]) -> None:
        fair = FairQueue(redis)
        started = await fair.started()
        self.tenant_waiting.clear()  # a tenant with nothing waiting drops out rather than stick
        tenants = set(started)
        for model in models:
            for tenant, n in (await fair.waiting(model)).items():
                self.tenant_waiting.labels(tenant, model).set(n)
                tenants.add(tenant)
        for tenant, n in (await fair.running(sorted(tenants))).items():
            self.tenant_running.labels(tenant).set(n)
        for tenant in tenants:
            self.tenant_started.labels(tenant).set(started.get(tenant, 0))
            self.tenant_tokens.labels(tenant).set((await read_usage(redis, tenant)).tokens)
            for kind, n in (await byte_quota.held(redis, tenant)).items():
                if kind != "total":
                    self.tenant_store_bytes.labels(tenant, kind).set(n)

    # ------------------------------------------------------------------ from events

    def _tool(self, name: Any) -> str:
        return name if isinstance(name, str) and name in self.known_tools else OTHER_TOOL

    def _remember(self, job_id: str, track: _Track) -> None:
        self._jobs[job_id] = track
        self._jobs.move_to_end(job_id)
        while len(self._jobs) > TRACKED_JOBS:
            self._jobs.popitem(last=False)

    def observe(self, ev: dict[str, Any], model_of: str | None = None) -> None:
        """Account one event (the JSON published on ``toolq:events``)."""
        self.events_seen.inc()
        job_id, ts = ev.get("job_id", ""), int(ev.get("ts") or 0)
        try:
            etype = EventType(ev.get("type"))
            d = MODELS[etype].model_validate(ev.get("data") or {})
        except (ValueError, ValidationError):
            return
        track = self._jobs.get(job_id)
        if isinstance(d, QueuedData):
            model = d.model or model_of or "unknown"
            self.submitted.labels(model).inc()
            self._remember(job_id, _Track(model, queued_ms=ts))
        elif isinstance(d, StartedData):
            model = d.model or (track.model if track else model_of) or "unknown"
            if track is None:
                track = _Track(model)
                self._remember(job_id, track)
            if track.queued_ms is not None and d.attempt == 1:
                self.queue_wait.labels(model).observe(max(0, ts - track.queued_ms) / 1000)
            track.started_ms, track.first_token = ts, False
        elif isinstance(d, TokenData):
            if track and track.started_ms is not None and not track.first_token:
                track.first_token = True
                self.ttft.labels(track.model).observe(max(0, ts - track.started_ms) / 1000)
        elif isinstance(d, ToolCallData):
            self.tool_calls.labels(self._tool(d.name)).inc()
        elif isinstance(d, ToolResultData):
            tool = self._tool(d.name)
            self.tool_results.labels(tool, "true" if d.ok else "false").inc()
            if d.executed and d.duration_ms is not None:
                self.tool_duration.labels(tool).observe(max(0.0, d.duration_ms) / 1000)
        elif etype in TERMINAL_EVENTS:
            self._jobs.pop(job_id, None)
            model = track.model if track else (model_of or "unknown")
            outcome = {EventType.final: "succeeded", EventType.error: "failed"}.get(etype, "cancelled")
            self.finished.labels(model, outcome).inc()
            if isinstance(d, FinalData):
                self.tokens.labels(model).inc(d.usage.completion_tokens)
                self.iterations.labels(model).observe(d.iterations)

    def needs_model(self, ev: dict[str, Any]) -> bool:
        """A terminal or started event of a job we have not tracked (the gateway started after it)."""
        return ev.get("job_id") not in self._jobs and ev.get("type") in ("final", "error", "cancelled")

    # ------------------------------------------------------------------ scrape

    async def render(self, redis: Any, fleet: Fleet, tenants: bool = False) -> bytes:
        """Refresh the gauges that are read from Redis at scrape time, then render them: the
        fleet-wide series, and with ``tenants`` (an operator asks) the per-tenant ones too.

        Models seen once stay listed, so a model whose workers are gone shows 0 workers and its
        leftover queue instead of vanishing from the graphs."""
        self._models_seen.update(fleet.models())
        self.tool_format.clear()  # a format no live worker uses any more is dropped, not left at its last count
        for w in fleet.workers:
            self.tool_format.labels(w.model, w.format or "unknown").inc()
        for view in await fleet.describe(redis, sorted(self._models_seen)):
            self.queue_depth.labels(view.id).set(view.queue_depth)
            self.workers.labels(view.id).set(view.workers)
            self.workers_needed.labels(view.id).set(view.workers_needed)
            workers = fleet.workers_of(view.id)
            self.slots.labels(view.id).set(sum(w.slots for w in workers))
            self.slots_busy.labels(view.id).set(sum(w.slots_busy for w in workers))
            self.batch_size.labels(view.id).set(sum(w.batch_size for w in workers) / len(workers) if workers else 0)
            self.prefill_tps.labels(view.id).set(sum(w.prefill_tps for w in workers))
            self.decode_tps.labels(view.id).set(sum(w.decode_tps for w in workers))
            for placed, n in view.placements.items():
                self.affinity.labels(view.id, placed).set(n)
        self.cache_conversations.clear()  # a worker that is gone drops out
        self.cache_bytes.clear()
        for w in fleet.workers:
            self.cache_conversations.labels(w.model, w.id).set(w.cache_conversations)
            for tier, n in w.cache_bytes.items():
                self.cache_bytes.labels(w.model, w.id, tier).set(n)
        for model, n in (await quarantined_counts(redis)).items():
            self.quarantined.labels(model).set(n)
        if not tenants:
            return generate_latest(self.registry)
        await self._tenant_figures(redis, sorted(self._models_seen))
        return generate_latest(self.registry) + generate_latest(self.tenant_registry)


_TERMINAL = frozenset(t.value for t in TERMINAL_EVENTS)


class EventObserver:
    """Background task: subscribe to ``toolq:events`` and feed GatewayMetrics, reconnecting."""

    def __init__(self, redis: Any, metrics: GatewayMetrics, model_of: Callable[[str], Awaitable[str | None]]):
        self.redis = redis
        self.metrics = metrics
        self.model_of = model_of
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()
        # set on every job's terminal event (the batch runner refills a freed slot at once, not
        # a tick later) and on a batch's creation here (gateway/openai/batches/runner.py)
        self.batch_wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="toolq-event-observer")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with AllEvents(self.redis) as feed:
                    self.subscribed.set()
                    delay = 0.1
                    while True:
                        raw = await feed.next(timeout_s=5.0)
                        if raw is not None:
                            await self._handle(raw)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as e:
                self.subscribed.clear()
                log.warning("event observer lost Redis; resubscribing", error=str(e), in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except Exception:  # a metrics bug must never take the gateway down
                log.exception("event observer error")
                await asyncio.sleep(delay)

    async def _handle(self, raw: bytes) -> None:
        try:
            ev = json.loads(raw)
        except (ValueError, TypeError):
            return
        if not isinstance(ev, dict):
            return
        if ev.get("type") in _TERMINAL:
            self.batch_wake.set()
        model = None
        if self.metrics.needs_model(ev):
            try:
                model = await self.model_of(str(ev.get("job_id", "")))
            except RedisError:
                model = None
        self.metrics.observe(ev, model)
