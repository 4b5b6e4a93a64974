"""Both tiers behind one index: find the longest saved prefix of a prompt, keep new states.

Every saved state is one conversation's cache from position 0: its tokens and llama.cpp's bytes
for them. Its key is a hash of all its tokens (and the model's identity); the index maps each of
its block hashes (blocks.py) to it, so a prompt's blocks lead to every state that shares them,
and the deepest block still known gives the states that share the most. The exact shared length
is found by comparing tokens, so a state serves a prompt up to the token where they part, not
only to a block boundary.

A state is written through: to host memory and, by the writer thread, to disk, so host memory
holds the recent states and the disk the older ones too, across restarts. A state whose tokens
are a prefix of a newer one's (the same conversation, a round earlier) is dropped when the newer
one is kept: the newer one serves every prompt the older one could. A state that a kept one
already holds all of is not saved at all (``covers``), so a conversation that is resumed and
ends without new tokens costs no copy.

The decode thread calls ``best``, ``covers``, ``save`` and ``take_host``: each is a look-up
under a lock that the writer thread holds only for bookkeeping, never around a file's I/O. A
state that is only on disk is read by the writer thread (``fetch``), so a slow disk never holds
up a decode step.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from array import array
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from worker.engine.slots import common_prefix
from worker.engine.tiers.blocks import DEFAULT_BLOCK, block_hashes
from worker.engine.tiers.disk import DiskTier
from worker.engine.tiers.host import HostTier
from worker.engine.tiers.identity import Identity
from worker.engine.tiers.spare import SpareBuffer
from worker.generation import CacheStats

log = structlog.get_logger("worker.engine.tiers")

Tier = Literal["host", "disk"]

WRITER_NICE = 19  # the writer thread's niceness (Linux: per thread); see _run


@dataclass(frozen=True)
class TierSettings:
    host_bytes: int
    disk_bytes: int
    disk_dir: Path | None  # None: no disk tier
    block: int = DEFAULT_BLOCK


@dataclass
class _Entry:
    key: str
    tokens: list[int]
    hashes: list[bytes]
    in_host: bool = False
    in_disk: bool = False
    pending: bytearray | None = None  # saved, not yet in a tier (the writer thread has it queued)


@dataclass(frozen=True)
class Found:
    """A saved state that shares a prefix with a prompt."""

    key: str
    tokens: list[int]
    tier: Tier  # where it would be read from: host memory (or still queued), else disk


@dataclass(frozen=True)
class HeldPrefix:
    """One saved state, as the fleet may see it (worker/engine/llama.py ``cache_holdings``)."""

    block_hashes: list[str]  # hex, chained (blocks.py): the last one names the whole prefix
    tokens: int
    tier: Literal["slot", "host", "disk"]


@dataclass(frozen=True)
class _Drop:
    key: str


@dataclass
class _Write:
    entry: _Entry
    payload: bytearray
    queued_at: float = field(default_factory=time.perf_counter)


class TieredStore:
    def __init__(
        self, identity: Identity, settings: TierSettings, stats: CacheStats | None = None, spare_bytes: int = 0
    ):
        """``spare_bytes``: the largest state a slot can hold, the size of the ready buffer the
        decode thread copies into (spare.py); 0: none, each copy allocates its own."""
        self.identity = identity
        self.block = settings.block
        self.stats = stats or CacheStats()
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._index: dict[bytes, set[str]] = {}
        self.host = HostTier(settings.host_bytes)
        self.disk = (
            DiskTier(settings.disk_dir, settings.disk_bytes, identity)
            if settings.disk_dir is not None and settings.disk_bytes > 0
            else None
        )
        if self.disk is not None:
            for key, entry in self.disk.scan().items():
                e = _Entry(key, entry.tokens, block_hashes(identity.digest, entry.tokens, self.block), in_disk=True)
                self._add(e)
            self.stats.refused_files = self.disk.refused
        self._update_bytes()
        self._jobs: queue.SimpleQueue[_Write | _Drop | tuple[str, Future[bytearray | None]] | None] = (
            queue.SimpleQueue()
        )
        self.spare = SpareBuffer(spare_bytes)
        self._thread = threading.Thread(target=self._run, name="kv-tiers", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the decode thread

    def best(self, prompt: Sequence[int]) -> tuple[Found, int] | None:
        """The saved state that shares the longest prefix with ``prompt``, and that length;
        host memory before disk on a tie."""
        with self._lock:
            keys: set[str] = set()
            for h in block_hashes(self.identity.digest, prompt, self.block):
                found = self._index.get(h)
                if not found:
                    break
                keys = found
            best: tuple[int, int, _Entry] | None = None
            for key in keys:
                e = self._entries[key]
                rank = (common_prefix(e.tokens, prompt), 1 if (e.in_host or e.pending is not None) else 0)
                if best is None or rank > best[:2]:
                    best = (*rank, e)
            if best is None:
                return None
            shared, in_host, e = best
            return Found(e.key, e.tokens, "host" if in_host else "disk"), shared

    def covers(self, tokens: Sequence[int]) -> bool:
        """Whether a saved state already holds all of ``tokens`` (then saving them again is waste);
        True too for fewer tokens than a block, which are not worth keeping."""
        if len(tokens) < self.block:
            return True
        found = self.best(tokens)
        return found is not None and found[1] >= len(tokens)

    def save(self, tokens: list[int], payload: bytearray) -> None:
        """Keep a state copied out of llama.cpp: indexed now, written by the writer thread."""
        key = hashlib.blake2b(self.identity.digest + array("i", tokens).tobytes(), digest_size=16).hexdigest()
        entry = _Entry(key, list(tokens), block_hashes(self.identity.digest, tokens, self.block), pending=payload)
        with self._lock:
            old = self._entries.get(key)
            if old is not None:
                self._remove(old)
            self._add(entry)
        self._jobs.put(_Write(entry, payload))

    def ready_buffer(self, n: int) -> bytearray | None:
        """A buffer of at least ``n`` bytes whose pages are mapped, to copy a state into, or None
        (spare.py)."""
        return self.spare.take(n)

    def make_ready(self) -> bool:
        """Make the next ready buffer where there is none; whether that was work (the decode
        thread calls it only when idle: see spare.py)."""
        if self.spare.size <= 0 or self.spare.ready:
            return False
        self.spare.fill()
        return True

    def take_host(self, key: str) -> bytearray | None:
        """A state's payload from host memory (or still queued for the tiers), or None."""
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                return None
            if e.pending is not None:
                return e.pending
            return self.host.get(key) if e.in_host else None

    def fetch(self, key: str) -> Future[bytearray | None]:
        """Read a state from disk on the writer thread (then it is in host memory too)."""
        fut: Future[bytearray | None] = Future()
        self._jobs.put((key, fut))
        return fut

    # ------------------------------------------------------------------ any thread

    def holdings(self) -> list[HeldPrefix]:
        with self._lock:
            return [
                HeldPrefix([h.hex() for h in e.hashes], len(e.tokens), "host" if e.in_host else "disk")
                for e in self._entries.values()
                if e.in_host or e.in_disk
            ]

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every save queued so far is in its tiers (tests, shutdown)."""
        fut: Future[bytearray | None] = Future()
        self._jobs.put(("", fut))
        fut.result(timeout)

    def close(self) -> None:
        self.flush()
        self._jobs.put(None)
        self._thread.join()
        if self.disk is not None:
            self.disk.release()

    # ------------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        # This thread's work (checksums, files) is background: on a CPU whose cores all decode, a
        # busy third thread makes every step's barriers wait for a preempted decode thread, and a
        # state's write stalled the other slots' steps by up to 40 of them (bench/bench_resume.py).
        # At the lowest priority it takes the CPU the decode threads leave.
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)
        except (OSError, AttributeError):  # not Linux, or not allowed: the default priority
            pass
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if isinstance(job, _Write):
                    self._write(job)
                elif isinstance(job, _Drop):
                    if self.disk is not None:
                        self.disk.drop(job.key)
                elif isinstance(job, tuple):
                    key, fut = job
                    fut.set_result(self._read(key) if key else None)
            except Exception as e:  # never let the writer die: the cache is an optimisation
                log.error("state tier job failed", error=repr(e))
                if isinstance(job, tuple) and not job[1].done():
                    job[1].set_result(None)

    def _write(self, job: _Write) -> None:
        t0 = time.perf_counter()
        e = job.entry
        with self._lock:
            if self._entries.get(e.key) is not e:  # replaced or superseded while queued
                return
            # earlier rounds of the same conversation: this state serves every prompt they could
            for key in self._candidates(e.hashes):
                old = self._entries[key]
                if old is not e and len(old.tokens) <= len(e.tokens) and e.tokens[: len(old.tokens)] == old.tokens:
                    self._remove(old)
            for key in self.host.put(e.key, job.payload):
                self._left(key, "host")
            e.in_host = e.key in self.host
        dropped: list[str] = []
        if self.disk is not None:
            dropped = self.disk.write(e.key, e.tokens, job.payload)  # outside the lock: file I/O
        with self._lock:
            e.pending = None
            if self.disk is not None and self._entries.get(e.key) is e:
                e.in_disk = e.key in self.disk
            for key in dropped:
                self._left(key, "disk")
            if not (e.in_host or e.in_disk) and self._entries.get(e.key) is e:
                self._remove(e)
            self._update_bytes()
        self.stats.timings.append(("save", "write", time.perf_counter() - t0))

    def _read(self, key: str) -> bytearray | None:
        if self.disk is None:
            return None
        with self._lock:
            e = self._entries.get(key)
            if e is None or not e.in_disk:
                return None
        payload = self.disk.read(key)
        with self._lock:
            self.stats.refused_files = self.disk.refused
            if payload is None:
                self._left(key, "disk")
            elif self._entries.get(key) is e:
                for k in self.host.put(key, payload):
                    self._left(k, "host")
                e.in_host = key in self.host
            self._update_bytes()
        return payload

    # ------------------------------------------------------------------ bookkeeping, under the lock

    def _candidates(self, hashes: list[bytes]) -> set[str]:
        out: set[str] = set()
        for h in hashes:
            out |= self._index.get(h, set())
        return out

    def _add(self, e: _Entry) -> None:
        self._entries[e.key] = e
        for h in e.hashes:
            self._index.setdefault(h, set()).add(e.key)

    def _remove(self, e: _Entry) -> None:
        self._entries.pop(e.key, None)
        for h in e.hashes:
            keys = self._index.get(h)
            if keys is not None:
                keys.discard(e.key)
                if not keys:
                    del self._index[h]
        self.host.drop(e.key)
        if self.disk is not None and e.in_disk:
            if threading.current_thread() is self._thread:
                self.disk.drop(e.key)
            else:  # the disk tier is the writer thread's alone
                self._jobs.put(_Drop(e.key))
        e.in_host = e.in_disk = False

    def _left(self, key: str, tier: Tier) -> None:
        """A tier let a state go (its limit, a refused file): forget it where no tier holds it."""
        e = self._entries.get(key)
        if e is None:
            return
        if tier == "host":
            e.in_host = False
        else:
            e.in_disk = False
        if not (e.in_host or e.in_disk or e.pending is not None):
            self._remove(e)

    def _update_bytes(self) -> None:
        self.stats.bytes["host"] = self.host.bytes
        self.stats.bytes["disk"] = self.disk.bytes if self.disk is not None else 0
        self.stats.entries["host"] = len(self.host)
        self.stats.entries["disk"] = len(self.disk) if self.disk is not None else 0
