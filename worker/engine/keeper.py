"""The keeper of saved state: what the decode loop asks of the tiers (worker/engine/tiers/).

The loop (worker/engine/scheduler.py) asks it four things:

- before placing a prompt, whether a saved state serves more of it than the slots do (``find``),
  and if so sets it into the slot (``begin_restore``); a state only on disk is read by the tiers'
  thread while the prompt waits (``WAIT``);
- before a placement throws a slot's cells away, whether they are saved (``may_take``): a slot
  whose generation ended is saved when it is given to another prompt, when the engine is idle, or
  at close, not at each round's end (a job's rounds follow each other in its slot, and a copy
  stalls the other slots' step);
- once per step, to move the save and the restore under way on by the time the pace of the
  steps allows (``between_steps``: half a recent step, all of it when nothing else decodes);
- while idle, one piece of work between looks at the inbox (``idle``).

The copies run on the decode thread (the context is not thread-safe), in pieces between steps
(tiers/piecewise.py), the rest on the tiers' own thread. Without tiers it keeps nothing and every
answer is "go on". The cache is an optimisation: a save or restore that fails is logged, never
raised, and a failed restore evaluates the prompt instead.
"""

from __future__ import annotations

from typing import Any

import llama_cpp
import structlog

from worker.engine.sequence import Generation, State
from worker.engine.slots import Slot, common_prefix
from worker.engine.tiers import TieredStore
from worker.engine.tiers.blocks import block_hashes
from worker.engine.tiers.llama_state import clear
from worker.engine.tiers.piecewise import PiecewiseRestore, PiecewiseSave, StepPace
from worker.engine.tiers.store import HeldPrefix
from worker.generation import EngineStats

log = structlog.get_logger("worker.engine")

WAIT = object()  # the prompt waits for its saved state to be read from disk

# A saved state is restored only when it covers this many more prompt tokens than the slots do:
# setting a state costs a copy of all its cells, about what evaluating a few tokens costs.
MIN_RESTORE_GAIN = 32

Found = tuple[str, list[int], int, bytearray]  # source tier, its tokens, tokens shared, payload


class StateKeeper:
    def __init__(
        self,
        ctx: Any,
        tiers: TieredStore | None,
        slots: list[Slot],
        stats: EngineStats,
        *,
        piece_tokens: int,
        piece_share: float,
    ):
        """``slots``: the engine's; the spare sequence id a piece passes through is the one after
        them (worker/engine/tiers/llama_state.py)."""
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.tiers = tiers
        self._slots = slots
        self._spare_id = len(slots)
        self._stats = stats
        self.piece_tokens = max(1, piece_tokens)
        self._saving: PiecewiseSave | None = None  # one slot's state on its way out, in pieces
        self._saving_slot: Slot | None = None
        self._pace = StepPace(share=piece_share)
        if tiers is not None:
            stats.cache = tiers.stats

    # ------------------------------------------------------------------ placing

    def best(self, prompt: list[int]) -> Slot | None:
        """The tokens of the longest saved prefix of ``prompt``, as a slot would hold them (for
        respelling, worker/engine/respell.py), or None."""
        found = self.tiers.best(prompt) if self.tiers is not None else None
        return Slot(-1, found[0].tokens) if found is not None else None

    def find(self, seq: Generation, tokens: list[int], keep: int) -> Found | object | None:
        """A saved state that serves more of ``tokens`` than the slots (``keep`` tokens); WAIT
        while it is read from disk; None."""
        if self.tiers is None:
            return None
        cache = self._stats.cache
        found = self.tiers.best(tokens)
        shared = min(found[1], len(tokens) - 1) if found is not None else 0
        if found is None or shared < keep + MIN_RESTORE_GAIN:
            if len(tokens) - keep >= self.tiers.block:  # a prompt a tier could have served
                for tier in ("host", "disk"):
                    cache.misses[tier] = cache.misses.get(tier, 0) + 1
            seq.fetch = None
            return None
        entry = found[0]
        if seq.fetch is not None and seq.fetch[0] == entry.key:
            if not seq.fetch[1].done():
                return WAIT
            payload, source = seq.fetch[1].result(), "disk"
            seq.fetch = None
        elif entry.tier == "host":
            payload, source = self.tiers.take_host(entry.key), "host"
        else:
            seq.fetch = (entry.key, self.tiers.fetch(entry.key))
            return WAIT
        if payload is None:  # dropped meanwhile, or a file that failed its checks
            return None
        if source == "disk":
            cache.misses["host"] = cache.misses.get("host", 0) + 1
        return source, entry.tokens, shared, payload

    def begin_restore(self, slot: Slot, seq: Generation, found: Found) -> tuple[int, str]:
        """Begin setting a saved state into the slot: the tokens it will hold and its source. Its
        pieces go in between steps (``between_steps``), and the sequence is RESTORING until then."""
        source, tokens, shared, payload = found
        clear(self._ctx, slot.seq_id)
        slot.tokens = []  # until the last piece is in, no other prompt may copy from these cells
        seq.restoring = PiecewiseRestore.begin(slot.seq_id, payload, list(tokens[:shared]), source)
        if seq.restoring is None:
            log.warning("saved state not restored: its pieces do not add up", source=source, tokens=len(tokens))
            return 0, source
        seq.state = State.RESTORING
        return shared, source

    def may_take(self, slot: Slot, prompt: list[int], keep: int) -> bool:
        """Whether ``prompt`` may take ``slot`` now, keeping ``keep`` of its tokens. A placement that
        throws some of the slot's state away (an eviction) waits until that state is saved, which
        goes on in pieces between steps while other slots decode; one save at a time."""
        loses = len(slot.tokens) > min(keep, common_prefix(slot.tokens, prompt))
        if loses and self._saving_slot is not slot:
            if self._saving is not None:
                if not self._covered(slot):
                    return False  # after the save under way (between_steps moves it on)
            else:
                try:
                    self._begin_save(slot)
                except Exception as e:  # the cache is an optimisation: never let it stop the engine
                    log.warning("state not saved", error=repr(e))
        if loses and self._saving_slot is slot:
            return False  # its positions are still being copied (between_steps moves the save on)
        # appending to a slot whose save is under way is safe: the save copies the positions it began with
        slot.unsaved = False  # what it keeps is the new prompt's: saved when that one ends
        return True

    def count(self, seq: Generation, keep: int, source: str, *, undo: bool = False) -> None:
        """The prompt tokens a cache serves it, in its result and the engine's counters; ``undo``
        takes back what a restore that failed half way had counted."""
        stats = self._stats
        if undo:
            if seq.cached:
                stats.cache.hits[source] = stats.cache.hits.get(source, 1) - 1
                stats.cached_tokens -= seq.cached
            seq.cached, seq.cached_by = 0, {}
            return
        seq.cached = keep
        seq.cached_by = {source: keep} if keep else {}
        if keep:
            stats.cache.hits[source] = stats.cache.hits.get(source, 0) + 1
        stats.cached_tokens += keep

    # ------------------------------------------------------------------ between steps

    def between_steps(self, running: list[Generation], waiting: bool) -> None:
        """Move the save under way on (all of it when only a prompt waits on it), then the
        restore under way; a sequence whose state is all in goes on to its prompt's rest."""
        if self._saving is not None and (running or waiting):
            self._save_some(self._pace.budget(bool(running)))
        seq = next((s for s in running if s.state is State.RESTORING), None)
        if seq is not None:
            self._restore_some(seq, self._pace.budget(any(s.state is not State.RESTORING for s in running)))

    def stepped(self, seconds: float) -> None:
        self._pace.stepped(seconds)

    def idle(self) -> bool:
        """While idle: one piece of the save under way, or begin saving a free slot whose state is
        unsaved, or make the next save's buffer (tiers/spare.py); whether there was work."""
        if self.tiers is None:
            return False
        try:
            if self._saving is not None:
                self._save_some(self._pace.budget(True))  # about half a step, then a look at the inbox
                return True
            slot = next((s for s in self._slots if s.unsaved and not s.busy), None)
            if slot is not None:
                self._begin_save(slot, idle=True)
                return True
        except Exception as e:  # the cache is an optimisation: never let it stop the engine
            log.warning("state not saved", error=repr(e))
            self._saving = self._saving_slot = None
            return True
        return self.tiers.make_ready()

    def save_all(self) -> None:
        """At a clean stop: every unsaved slot kept for the next start."""
        while self.tiers is not None and (self._saving is not None or any(s.unsaved for s in self._slots)):
            self.idle()

    def _restore_some(self, seq: Generation, budget_s: float) -> None:
        r: PiecewiseRestore = seq.restoring
        try:
            spent = r.restore(self._ctx, self._spare_id, budget_s)
            self._stats.cache.timings.append(("restore", r.source, spent))
        except Exception as e:  # the cache is an optimisation: evaluate the prompt instead
            log.warning("saved state not restored", error=repr(e))
            r.failed = True
        if not r.done:
            return
        seq.restoring = None
        slot = seq.slot
        assert slot is not None
        seq.state = State.GENERATING if seq.prompted else State.PREFILLING
        if r.failed:
            log.warning("saved state not restored", source=r.source, tokens=len(r.tokens))
            clear(self._ctx, slot.seq_id)
            if not seq.resume:
                self.count(seq, 0, r.source, undo=True)
            seq.pending = list(seq.placing)
            return
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, len(r.tokens), -1)
        slot.tokens = r.tokens

    def _begin_save(self, slot: Slot, *, idle: bool = False) -> None:
        """Start copying a slot's state out to the tiers, unless a saved state holds it already.
        An eviction copies into the ready buffer (tiers/spare.py), since a prompt waits on it; a
        save while idle grows its own a piece at a time and leaves that buffer for the next one."""
        slot.unsaved = False
        if self.tiers is None or self.tiers.covers(slot.tokens):
            return
        ready = None if idle else self.tiers.ready_buffer
        self._saving = PiecewiseSave.begin(self._ctx, slot.seq_id, slot.tokens, ready, self.piece_tokens)
        self._saving_slot = slot if self._saving is not None else None

    def _save_some(self, budget_s: float) -> None:
        """Copy pieces of the save under way for about ``budget_s`` (at least one piece); hand the
        state to the tiers once it is all out."""
        saving = self._saving
        assert saving is not None and self.tiers is not None
        try:
            spent = saving.copy(self._ctx, self._spare_id, budget_s)
        except Exception as e:  # the cache is an optimisation: never let it stop the engine
            log.warning("state not saved", error=repr(e))
            self._saving = self._saving_slot = None
            return
        self._stats.cache.timings.append(("save", "copy", spent))
        if saving.done:
            self._saving = self._saving_slot = None
            self.tiers.save(saving.tokens, saving.payload())

    def _covered(self, slot: Slot) -> bool:
        return self.tiers is None or self.tiers.covers(slot.tokens)

    # ------------------------------------------------------------------ endings

    def give_up(self, seq: Generation) -> None:
        """A sequence ended half way through its restore: its slot holds nothing usable."""
        seq.restoring = None
        if seq.slot is not None:
            clear(self._ctx, seq.slot.seq_id)
            seq.slot.tokens = []

    def forget(self) -> None:
        """After a failed step: nothing under way survives the cache being cleared."""
        self._saving = self._saving_slot = None

    def holdings(self) -> list[HeldPrefix]:
        """The slots' cached prefixes as held prefixes (tier "slot"); a copy, read between steps."""
        if self.tiers is None:
            return []
        out = []
        for slot in self._slots:
            tokens = list(slot.tokens)
            hashes = block_hashes(self.tiers.identity.digest, tokens, self.tiers.block)
            if hashes:
                out.append(HeldPrefix([h.hex() for h in hashes], len(tokens), "slot"))
        return out
