"""The tool services' part of the fleet: which tools the live service instances serve right now.

Each instance keeps its entry fresh with ``register_service`` (store.keys: set ``toolq:services``,
one expiring hash per instance, as workers do in ``store/fleet.py``). Workers read it to know
where a call can go, the gateway to list service tools and check a job's tool names.
``ServiceInfo`` is the hash's one codec.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from store import keys
from store.entries import drop_entry, read_entries, tool_specs, write_entry

__all__ = ["ServiceFleet", "ServiceFleetView", "ServiceInfo", "deregister_service", "read_services", "register_service"]


@dataclass(frozen=True)
class ServiceInfo:
    """One live instance. Each of its ``tools`` is an OpenAI function spec plus the top-level keys
    ``where`` ("service"), ``requires_approval`` and ``timeout_s`` (None: the caller's)."""

    id: str
    tools: tuple[dict[str, Any], ...]
    heartbeat_ms: int = 0
    concurrency: int = 1
    busy: int = 0
    host: str = ""
    pid: int = 0

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(t["function"]["name"] for t in self.tools)

    def to_hash(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tools": json.dumps(list(self.tools)),
            "heartbeat_ms": self.heartbeat_ms,
            "concurrency": self.concurrency,
            "busy": self.busy,
            "host": self.host,
            "pid": self.pid,
        }

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes]) -> ServiceInfo | None:
        """Parse one hash; None for an entry too broken to trust."""
        d = {k.decode(): v.decode() for k, v in h.items()}
        try:
            tools = tool_specs(d.get("tools"))
            return cls(
                id=d["id"],
                tools=tools,
                heartbeat_ms=int(d.get("heartbeat_ms") or 0),
                concurrency=int(d.get("concurrency") or 1),
                busy=int(d.get("busy") or 0),
                host=d.get("host", ""),
                pid=int(d.get("pid") or 0),
            )
        except (KeyError, ValueError, TypeError):
            return None


@dataclass(frozen=True)
class ServiceFleet:
    """A snapshot of the live instances."""

    instances: tuple[ServiceInfo, ...] = field(default_factory=tuple)

    def tools(self) -> dict[str, dict[str, Any]]:
        """Every served tool's spec, by name. Instances of one tool should agree; while they do
        not (a rolling update), the spec of the one that beat last wins."""
        out: dict[str, dict[str, Any]] = {}
        for inst in sorted(self.instances, key=lambda i: i.heartbeat_ms):
            for spec in inst.tools:
                out[spec["function"]["name"]] = spec
        return out

    def serves(self, name: str) -> bool:
        return any(name in inst.tool_names for inst in self.instances)

    def instances_of(self, name: str) -> list[ServiceInfo]:
        return [inst for inst in self.instances if name in inst.tool_names]


async def register_service(redis: Any, info: ServiceInfo, ttl_ms: int) -> None:
    """Write or refresh an instance's entry; it expires unless refreshed within ``ttl_ms``."""
    await write_entry(redis, keys.SERVICES, keys.service(info.id), info.id, info.to_hash(), ttl_ms)


async def deregister_service(redis: Any, instance_id: str) -> None:
    await drop_entry(redis, keys.SERVICES, keys.service(instance_id), instance_id)


async def read_services(redis: Any, *, prune: bool = True) -> ServiceFleet:
    """The live instances (an instance whose entry expired is dead; ``prune`` forgets it)."""
    live = await read_entries(redis, keys.SERVICES, keys.service, ServiceInfo.from_hash, prune=prune)
    return ServiceFleet(tuple(live))


class ServiceFleetView:
    """The live instances re-read from Redis at most every ``max_age_s``: a caller learns of a new or
    dead instance that much later, and a burst of calls does not re-read it for each."""

    def __init__(self, redis: Any, max_age_s: float = 2.0):
        self.redis = redis
        self.max_age_s = max_age_s
        self.snapshot = ServiceFleet()
        self._at: float | None = None
        self._lock = asyncio.Lock()

    async def get(self, *, fresh: bool = False) -> ServiceFleet:
        if not fresh and self._at is not None and time.monotonic() - self._at < self.max_age_s:
            return self.snapshot
        async with self._lock:  # one reader refreshes; the others take its answer
            if fresh or self._at is None or time.monotonic() - self._at >= self.max_age_s:
                self.snapshot = await read_services(self.redis)
                self._at = time.monotonic()
            return self.snapshot
