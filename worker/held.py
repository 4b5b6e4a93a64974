"""The conversations this worker holds, as it tells the fleet (store/affinity.py).

A conversation's KV state lives in the engine's slots, and in its saved-state tiers (host memory
and disk, worker/engine/tiers/) once its slot is given to another prompt, so the worker holds as
many conversations as it has slots plus the states its tiers keep: the ones it ran last. It records each
transcript it ran (a job that ended or paused: its messages, answer and tool results) as its
conversation-prefix keys (store/conversation_keys.py), keeps the last ``capacity`` of
them, and publishes the union of their keys as its held set.

``engine_holdings`` is the one place that reads what the engine says it can hold: its slots and
the states and bytes per tier in its stats (``EngineStats.cache``; a worker without tiers
reports none, and its slots are the capacity).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from store.affinity import publish_held, update_held
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
    """The last ``capacity`` transcripts this worker ran, by their prefix keys.

    Transcripts share keys (every conversation with the same system prompt and tools shares its
    first ones), so each key is counted; what ``publish`` sends after a job is only the keys whose
    count rose from or fell to zero since the last one, and nothing when none did (a worker that
    runs the same prefix again and again writes nothing). The heartbeat writes the whole set
    (``publish(..., whole=True)``), which also mends any change a failed write lost."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self._convs: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # last key -> its keys, oldest first
        self._count: Counter[str] = Counter()  # key -> transcripts held that have it
        self._added: set[str] = set()  # keys new to the set since the last publish
        self._dropped: set[str] = set()  # keys gone from the set since the last publish

    def record(self, keys: Sequence[str]) -> None:
        """A transcript this worker just ran (its state is in a slot now). One that continues a
        held conversation replaces it: the slot that held the earlier part holds the whole."""
        if not keys:
            return
        mine = set(keys)
        # added before the old ones go, so a key the transcripts share never reads as dropped
        for k in set(keys):
            self._count_up(k)
        for tip in [t for t in self._convs if t in mine]:
            self._forget(tip)
        self._convs[keys[-1]] = tuple(keys)
        self._trim()

    def resize(self, capacity: int) -> None:
        if max(1, capacity) != self.capacity:
            self.capacity = max(1, capacity)
            self._trim()

    def _trim(self) -> None:
        while len(self._convs) > self.capacity or (len(self._convs) > 1 and len(self._count) > MAX_KEYS):
            self._forget(next(iter(self._convs)))

    def _forget(self, tip: str) -> None:
        for k in set(self._convs.pop(tip)):
            self._count[k] -= 1
            if self._count[k] <= 0:
                del self._count[k]
                if k in self._added:
                    self._added.discard(k)  # came and went between two publishes
                else:
                    self._dropped.add(k)

    def _count_up(self, k: str) -> None:
        self._count[k] += 1
        if self._count[k] == 1:
            if k in self._dropped:
                self._dropped.discard(k)  # went and came back between two publishes
            else:
                self._added.add(k)

    @property
    def changed(self) -> bool:
        return bool(self._added or self._dropped)

    def keys(self) -> list[str]:
        return sorted(self._count)

    def __len__(self) -> int:
        return len(self._convs)

    async def publish(self, redis: Any, worker_id: str, ttl_ms: int, *, whole: bool = False) -> None:
        """Write the changes to the held set since the last publish, or with ``whole`` the whole set
        (it expires with the registry entry unless written again)."""
        added, dropped = self._added, self._dropped
        if not whole and not added and not dropped:
            return
        self._added, self._dropped = set(), set()
        try:
            if whole:
                await publish_held(redis, worker_id, self.keys(), ttl_ms)
            else:
                await update_held(redis, worker_id, sorted(added), sorted(dropped), ttl_ms)
        except BaseException:
            self._added |= added  # not written: sent with the next publish
            self._dropped |= dropped
            raise
