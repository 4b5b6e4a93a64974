"""The conversations this worker holds, as it tells the fleet (toolq/store/affinity.py).

A conversation's KV state lives in the engine's slots, and in its saved-state tiers (host memory
and disk, worker/engine/tiers/) once its slot is given to another prompt, so the worker holds as
many conversations as it has slots plus the states its tiers keep: the ones it ran last. It records each
transcript it ran (a job that ended or paused: its messages, answer and tool results) as its
conversation-prefix keys (toolq/store/conversation_keys.py), keeps the last ``capacity`` of
them, and publishes the union of their keys as its held set.

``engine_holdings`` is the one place that reads what the engine says it can hold: its slots and
the states and bytes per tier in its stats (``EngineStats.cache``; a worker without tiers
reports none, and its slots are the capacity).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolq.store.affinity import publish_held
from worker.generation import EngineStats

MAX_KEYS = 8192  # the held set's bound, whatever the engine says it can hold


@dataclass(frozen=True)
class Holdings:
    capacity: int  # conversations the engine can serve from cache
    tier_bytes: dict[str, int] = field(default_factory=dict)  # bytes per tier, where the engine says


def engine_holdings(stats: EngineStats) -> Holdings:
    """What the engine's stats say it can hold (see the module's note). A state kept both in host
    memory and on disk is counted once: the larger tier's count bounds the saved states."""
    saved = max(stats.cache.entries.values(), default=0)
    return Holdings(capacity=max(1, stats.slots) + saved, tier_bytes=dict(stats.cache.bytes))


class HeldConversations:
    """The last ``capacity`` transcripts this worker ran, by their prefix keys."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self._convs: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # last key -> its keys, oldest first
        self.changed = False

    def record(self, keys: Sequence[str]) -> None:
        """A transcript this worker just ran (its state is in a slot now). One that continues a
        held conversation replaces it: the slot that held the earlier part holds the whole."""
        if not keys:
            return
        mine = set(keys)
        for tip in [t for t in self._convs if t in mine]:
            del self._convs[tip]
        self._convs[keys[-1]] = tuple(keys)
        self._trim()
        self.changed = True

    def resize(self, capacity: int) -> None:
        if max(1, capacity) != self.capacity:
            self.capacity = max(1, capacity)
            self._trim()
            self.changed = True

    def _trim(self) -> None:
        while len(self._convs) > self.capacity or (len(self._convs) > 1 and self._n_keys() > MAX_KEYS):
            self._convs.popitem(last=False)

    def _n_keys(self) -> int:
        return sum(len(k) for k in self._convs.values())

    def keys(self) -> list[str]:
        return sorted({k for ks in self._convs.values() for k in ks})

    def __len__(self) -> int:
        return len(self._convs)

    async def publish(self, redis: Any, worker_id: str, ttl_ms: int) -> None:
        """Write the held set (it expires with the registry entry unless published again)."""
        self.changed = False
        await publish_held(redis, worker_id, self.keys(), ttl_ms)
