"""The fleet: which models and tools the live workers serve right now (and, beside them, the
live tool service instances, ``store/services.py``).

Each worker keeps its entry fresh with ``register`` (store.keys: set ``toolq:workers``, one
expiring hash per worker); the gateway and the SDK's Redis mode read it with ``read_fleet`` to
resolve a job's model and check its tools before enqueueing, so a job for a model nobody serves is
refused at once instead of waiting in a queue forever. ``WorkerInfo`` is the hash's one codec.

A model can also be *declared* (the gateway's ``TOOLQ_DECLARED_MODELS``, with the slots one of its
workers will have): its jobs are accepted and wait while no worker serves it, so an autoscaler can
start the first worker from zero on ``workers_needed``.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast, get_args

from store import affinity, keys, redis_urls
from store.entries import drop_entry, read_entries, tool_specs, write_entry
from store.fair import FairQueue
from store.services import ServiceFleet, read_services
from toolq.errors import Unavailable, UnknownModel, UnknownTool
from toolq.wire.api import ModelView, ToolSpec, WorkerCache
from toolq.wire.protocol import JobRequest, Where


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    model: str
    tools: tuple[dict[str, Any], ...]  # OpenAI function specs
    gpu: int | None = None
    heartbeat_ms: int = 0
    busy: int = 0
    jobs_done: int = 0
    max_jobs: int = 1
    host: str = ""
    pid: int = 0
    # The engine: sequences decoded together, how many are generating now, and over the last
    # few seconds the mean batch (sequences per decode step) and prompt and generated tokens/s.
    slots: int = 1
    slots_busy: int = 0
    batch_size: float = 0.0
    prefill_tps: float = 0.0
    decode_tps: float = 0.0
    # Prompts placed since start: their tokens, and those a slot's cache already held (cache hits).
    prompt_tokens: int = 0
    cached_tokens: int = 0
    # The conversation: the tool-call format the worker parses and the chat template it renders.
    format: str = ""
    template: str = ""
    # Its cache (store/affinity.py): the conversations it holds, and bytes per tier where
    # its engine reports them (worker/held.py: engine_holdings).
    cache_conversations: int = 0
    cache_bytes: dict[str, int] = field(default_factory=dict)

    def cache_view(self) -> WorkerCache:
        return WorkerCache(
            worker=self.id,
            conversations=self.cache_conversations,
            bytes=dict(self.cache_bytes),
            slots=self.slots,
            busy=self.busy,
        )

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(t["function"]["name"] for t in self.tools)

    def to_hash(self) -> dict[str, Any]:
        """The fleet entry of this worker (what ``from_hash`` reads back)."""
        return {
            "id": self.id,
            "model": self.model,
            "gpu": "" if self.gpu is None else self.gpu,
            "tools": json.dumps(list(self.tools)),
            "heartbeat_ms": self.heartbeat_ms,
            "busy": self.busy,
            "jobs_done": self.jobs_done,
            "max_jobs": self.max_jobs,
            "host": self.host,
            "pid": self.pid,
            "slots": self.slots,
            "slots_busy": self.slots_busy,
            "batch_size": self.batch_size,
            "prefill_tps": self.prefill_tps,
            "decode_tps": self.decode_tps,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "format": self.format,
            "template": self.template,
            "cache_conversations": self.cache_conversations,
            "cache_bytes": json.dumps(self.cache_bytes, sort_keys=True),
        }

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes]) -> WorkerInfo | None:
        """Parse one fleet entry; None for an entry too broken to trust (a half-written hash)."""
        d = {k.decode(): v.decode() for k, v in h.items()}
        try:
            tools = tool_specs(d.get("tools"))
            return cls(
                id=d["id"],
                model=d["model"],
                tools=tools,
                gpu=int(d["gpu"]) if d.get("gpu") else None,
                heartbeat_ms=int(d.get("heartbeat_ms") or 0),
                busy=int(d.get("busy") or 0),
                jobs_done=int(d.get("jobs_done") or 0),
                max_jobs=int(d.get("max_jobs") or 1),
                host=d.get("host", ""),
                pid=int(d.get("pid") or 0),
                slots=int(d.get("slots") or 1),
                slots_busy=int(d.get("slots_busy") or 0),
                batch_size=float(d.get("batch_size") or 0),
                prefill_tps=float(d.get("prefill_tps") or 0),
                decode_tps=float(d.get("decode_tps") or 0),
                prompt_tokens=int(d.get("prompt_tokens") or 0),
                cached_tokens=int(d.get("cached_tokens") or 0),
                format=d.get("format", ""),
                template=d.get("template", ""),
                cache_conversations=int(d.get("cache_conversations") or 0),
                cache_bytes={str(k): int(v) for k, v in json.loads(d.get("cache_bytes") or "{}").items()},
            )
        except (KeyError, ValueError, TypeError, AttributeError):
            return None


@dataclass(frozen=True)
class Fleet:
    """A snapshot of the live workers and tool service instances."""

    workers: tuple[WorkerInfo, ...] = field(default_factory=tuple)
    services: ServiceFleet = field(default_factory=ServiceFleet)
    # Declared models (model = its queue's name) -> slots one of its workers will have.
    declared: Mapping[str, int] = field(default_factory=dict)

    def models(self) -> list[str]:
        """Served and declared models: the ones a job may name."""
        return sorted({w.model for w in self.workers} | set(self.declared))

    def slots_per_worker(self, model: str) -> int:
        """What one more worker of the model adds: the most slots a live one has, else the declared
        figure (no worker yet), else 1."""
        return max((w.slots for w in self.workers_of(model)), default=self.declared.get(model, 1)) or 1

    def workers_needed(self, model: str, depth: int) -> int:
        """Workers that ``depth`` jobs (waiting plus running) fill: what an autoscaler scales to."""
        return math.ceil(depth / self.slots_per_worker(model))

    def workers_of(self, model: str) -> list[WorkerInfo]:
        return [w for w in self.workers if w.model == model]

    def tools_of(self, model: str) -> dict[str, dict[str, Any]]:
        """Tools every worker of the model serves. A job may land on any of them, so a tool only
        some of them have is not offered (during a rolling update the sets can differ)."""
        workers = self.workers_of(model)
        if not workers:
            return {}
        common = frozenset.intersection(*(w.tool_names for w in workers))
        return {t["function"]["name"]: t for t in workers[0].tools if t["function"]["name"] in common}

    def served_tools(self, model: str) -> dict[str, dict[str, Any]]:
        """The tools a job of the model can name: its workers' own, then the live tool services'
        (any worker reaches those; a worker's own tool of the same name wins, as in its resolver)."""
        return {**self.services.tools(), **self.tools_of(model)}

    def tool_specs(self) -> list[ToolSpec]:
        """Every tool a live model serves, once, with the models that serve it and where it runs;
        sorted by name."""
        specs: dict[str, ToolSpec] = {}
        for model in self.models():
            for name, spec in self.served_tools(model).items():
                if name not in specs:
                    specs[name] = ToolSpec(
                        function=spec["function"],
                        models=[],
                        where=_where(spec),
                        requires_approval=bool(spec.get("requires_approval", False)),
                    )
                specs[name].models.append(model)
        return [specs[n] for n in sorted(specs)]

    async def describe(self, redis: Any, models: list[str]) -> list[ModelView]:
        """The given models with their workers, tools, queue depth and the workers it needs."""
        if not models:
            return []
        depths = await queue_depths(redis, models)
        placed = {m: await affinity.placements(redis, m) for m in models}
        return [
            ModelView(
                id=m,
                workers=len(self.workers_of(m)),
                busy=sum(w.busy for w in self.workers_of(m)),
                queue_depth=d,
                tools=sorted(self.tools_of(m)),
                slots=sum(w.slots for w in self.workers_of(m)),
                slots_busy=sum(w.slots_busy for w in self.workers_of(m)),
                created=max((w.heartbeat_ms for w in self.workers_of(m)), default=0) // 1000,
                format=", ".join(sorted({w.format for w in self.workers_of(m) if w.format})),
                caches=[w.cache_view() for w in sorted(self.workers_of(m), key=lambda w: w.id)],
                placements=placed[m],
                declared=m in self.declared,
                slots_per_worker=self.slots_per_worker(m),
                workers_needed=self.workers_needed(m, d),
            )
            for m, d in zip(models, depths, strict=True)
        ]

    def resolve(self, request: JobRequest) -> str:
        """The model the job goes to, after checking that its model and tools are served.

        Raises Unavailable (no live worker at all), UnknownModel or UnknownTool.
        """
        models = self.models()
        if not models:
            raise Unavailable("no live worker is registered; start a worker or retry later")
        model = request.model
        if model is None:
            if len(models) > 1:
                raise UnknownModel(
                    f"model is required when several are served; choose one of: {', '.join(models)}", field="model"
                )
            model = models[0]
        elif model not in models:
            raise UnknownModel(
                f"model {model!r} is not served by any live worker; served: {', '.join(models)}", field="model"
            )
        if not self.workers_of(model):
            # Declared, no worker yet: its workers' own tools are unknown until one registers; the
            # worker that takes the job ends it with unknown_tool if it lacks one (worker/endings.py).
            return model
        served = self.served_tools(model)
        asked = list(request.served_tool_names() or [])
        forced = request.forced_tool()
        if forced is not None and request.tools is None:
            asked.append(forced)
        unknown = sorted({name for name in asked if name not in served})
        if unknown:
            raise UnknownTool(
                f"unknown tool(s) {', '.join(map(repr, unknown))} for model {model!r}; "
                f"available: {', '.join(sorted(served)) or 'none'}",
                field="tools",
            )
        if request.tool_choice == "required" and not served and not request.client_tools():
            raise UnknownTool(f"tool_choice 'required' but model {model!r} serves no tools", field="tool_choice")
        return model


async def queue_depths(redis: Any, models: list[str]) -> list[int]:
    """Each model's jobs waiting or running: arq's queue (a job stays there until it ends) and the
    jobs waiting for a fair turn (store/fair.py)."""
    async with redis.pipeline(transaction=False) as pipe:
        for m in models:
            pipe.zcard(keys.queue(m))
        depths = await pipe.execute()
    fair = FairQueue(redis)
    return [d + sum((await fair.waiting(m)).values()) for m, d in zip(models, depths, strict=True)]


def _where(spec: dict[str, Any]) -> Where:
    where = spec.get("where")
    return cast("Where", where) if where in get_args(Where) else "worker"


async def register(redis: Any, info: WorkerInfo, ttl_ms: int) -> None:
    """Write or refresh a worker's entry; it expires unless refreshed within ``ttl_ms``."""
    await write_entry(redis, keys.WORKERS, keys.worker(info.id), info.id, info.to_hash(), ttl_ms)


async def deregister(redis: Any, worker_id: str) -> None:
    """Remove a worker's entry (a worker stopping cleanly)."""
    await drop_entry(redis, keys.WORKERS, keys.worker(worker_id), worker_id)


async def read_fleet(redis: Any, *, prune: bool = True) -> Fleet:
    """The live workers and tool service instances, read side by side (each two round trips).

    A member whose hash expired belongs to a dead worker or instance; with ``prune`` it is dropped
    from its set (a live one re-adds itself on its next heartbeat, so this can never hide it for long).
    """
    workers, services = await asyncio.gather(
        read_entries(redis, keys.WORKERS, keys.worker, WorkerInfo.from_hash, prune=prune),
        read_services(redis, prune=prune),
    )
    return Fleet(tuple(workers), services)


def local_worker_alive(redis_url: str, host: str | None = None) -> bool:
    """True when a live worker of this host is registered: the container healthcheck.

    Synchronous and dependency-light on purpose: it runs as ``python -c`` every few seconds.
    """
    host = host or socket.gethostname()
    r = redis_urls.sync_client(redis_url, socket_connect_timeout=2, socket_timeout=2)
    try:
        # A sync client: redis-py types its commands for both clients (a result or an awaitable).
        for wid in cast("set[bytes]", r.smembers(keys.WORKERS)):
            if cast("bytes | None", r.hget(keys.worker(wid.decode()), "host")) == host.encode():
                return True
        return False
    finally:
        r.close()


def healthcheck() -> int:
    """Exit status for a worker container's healthcheck (0 healthy), reading TOOLQ_REDIS_URL."""
    from toolq.settings import RedisSettings

    try:
        return 0 if local_worker_alive(RedisSettings().redis_url) else 1
    except Exception:
        return 1


def registered_workers(redis_url: str) -> set[str]:
    """The ids of the workers whose entries are live now (synchronous, for the command line: `toolq
    demo` waits with it for the worker it started)."""
    r = redis_urls.sync_client(redis_url)
    try:
        ids = [w.decode() for w in cast("set[bytes]", r.smembers(keys.WORKERS))]
        return {w for w in ids if r.exists(keys.worker(w))}
    finally:
        r.close()
