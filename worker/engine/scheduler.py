"""Continuous batching: one thread, one llama.cpp context, every active sequence in each step.

A llama.cpp context is not thread-safe, so one thread owns it. Each step is one ``llama_decode``
over one batch that holds the next token of every sequence that is generating, then prompt
chunks of sequences that are being prefilled, up to ``n_batch`` tokens in all, so a long prompt
never holds the others back for more than a step. After the decode each generating sequence
samples its next token with its own sampler chain and grammar. New requests join between steps,
a finished sequence leaves at once, and a stop flag (cancel, timeout) ends its sequence within a
step. A request that finds every slot busy waits for one to free up.

Which slot a prompt goes to, and what of its prefix is already cached, is worker/engine/slots.py.
With saved-state tiers (worker/engine/tiers/), a prompt whose longest prefix is saved in host
memory or on disk, and longer than any slot's, has that state set into its slot instead of
evaluated; a state only on disk is read by the tiers' own thread while the prompt waits. A
slot whose generation ended has its state copied out when the slot is given to another prompt,
when the engine is idle, or when it closes (not at each round's end: a job's rounds follow each
other in its slot, and a copy stalls the other slots' step); the copy is on this thread (the
context is not thread-safe), in pieces between steps while others decode
(worker/engine/tiers/piecewise.py), the rest on the tiers' thread.

Under a grammar, the text the grammar forces next (worker/grammar/forced.py) is not sampled a
token a step: its tokens join the sampled one as a chunk, like a prompt's, and the sequence
samples again after them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import llama_cpp
import structlog

from worker.engine.respell import respell
from worker.engine.sampling import TokenSampler
from worker.engine.sequence import Sequence
from worker.engine.slots import Placement, Slot, common_prefix, place
from worker.engine.tiers import TieredStore
from worker.engine.tiers.blocks import block_hashes
from worker.engine.tiers.llama_state import clear
from worker.engine.tiers.piecewise import PIECE_TOKENS, PiecewiseRestore, PiecewiseSave, StepPace
from worker.engine.tiers.store import HeldPrefix
from worker.generation import EngineError, EngineStats, GenerationResult
from worker.grammar.check import GrammarError
from worker.grammar.forced import Forced

log = structlog.get_logger("worker.engine")


_CLOSE = object()
_WAIT = object()  # the head of the queue waits for its saved state to be read from disk

# A saved state is restored only when it covers this many more prompt tokens than the slots do:
# setting a state costs a copy of all its cells, about what evaluating a few tokens costs.
MIN_RESTORE_GAIN = 32


def _follow(gbnf: str) -> Forced | None:
    """A follower of the grammar, or None where it cannot be read (then every token is sampled)."""
    try:
        return Forced(gbnf)
    except (GrammarError, RecursionError):
        return None


class Scheduler:
    def __init__(
        self,
        ctx: Any,
        vocab: Any,
        n_vocab: int,
        *,
        slots: int,
        n_batch: int,
        prefill_chunk: int,
        is_eog: Callable[[int], bool],
        piece: Callable[[int], bytes],
        spell: Callable[[int], bytes] | None = None,
        tokenize: Callable[[str], list[int]] | None = None,
        tiers: TieredStore | None = None,
        piece_tokens: int = PIECE_TOKENS,
        piece_share: float = 0.5,
    ):
        """The context has ``slots + 1`` sequence ids: one per slot, and a spare one that a save
        or restore in pieces passes through (worker/engine/tiers/llama_state.py)."""
        self._ctx = ctx
        self.tiers = tiers
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._sampler = TokenSampler(ctx, vocab, n_vocab)
        self._is_eog = is_eog
        self._piece = piece
        self._spell = spell  # None: match cached prefixes on token ids only
        self._tokenize = tokenize  # None: every token is sampled, forced text included
        self.jump_forward = tokenize is not None
        self.n_batch = n_batch
        self.prefill_chunk = max(1, prefill_chunk)
        self.slots = [Slot(i) for i in range(slots)]
        self._spare_id = slots
        self.piece_tokens = max(1, piece_tokens)
        self._saving: PiecewiseSave | None = None  # one slot's state on its way out, in pieces
        self._saving_slot: Slot | None = None
        self._pace = StepPace(share=piece_share)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._clock = 0
        self._closed = False
        self.stats = EngineStats(slots=slots)
        if tiers is not None:
            self.stats.cache = tiers.stats
        self._blocked = False  # the head of the queue waits on a disk read
        self._thread = threading.Thread(target=self._run, name="llama-batch", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ from other threads

    def submit(self, seq: Sequence) -> None:
        if self._closed:
            raise EngineError("the engine is closed")
        self._inbox.put(seq)

    def slot_holdings(self) -> list[HeldPrefix]:
        """The slots' cached prefixes as held prefixes (tier "slot"); a copy, read between steps."""
        if self.tiers is None:
            return []
        out = []
        for slot in self.slots:
            tokens = list(slot.tokens)
            hashes = block_hashes(self.tiers.identity.digest, tokens, self.tiers.block)
            if hashes:
                out.append(HeldPrefix([h.hex() for h in hashes], len(tokens), "slot"))
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_CLOSE)
        self._thread.join()
        llama_cpp.llama_batch_free(self._batch)

    # ------------------------------------------------------------------ the decode thread

    def _run(self) -> None:
        while True:
            if not self._running and not self._waiting:
                # idle: keep what the slots hold, then make the next save's buffer (tiers/spare.py),
                # one piece of work between looks at the inbox
                if self._save_one() or (self.tiers is not None and self.tiers.make_ready()):
                    try:
                        item = self._inbox.get_nowait()
                    except queue.Empty:
                        item = None
                else:
                    item = self._inbox.get()  # idle: sleep until work (or close) arrives
            elif not self._running and self._blocked:  # only a disk read to wait for: poll gently
                try:
                    item = self._inbox.get(timeout=0.002)
                except queue.Empty:
                    item = None
            else:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    item = None
            while item is not None:
                if item is _CLOSE:
                    self._fail_all(EngineError("the engine is closed"))
                    while self._save_one():  # a clean stop keeps every conversation for the next start
                        pass
                    return
                self._waiting.append(item)
                self._count()
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    item = None
            try:
                self._admit()
                if self._saving is not None and (self._running or self._waiting):
                    self._save_some()  # between two steps, or all of it when only a prompt waits on it
                self._restore_some()
                t0 = time.perf_counter()
                if self._running and self._step():
                    self._pace.stepped(time.perf_counter() - t0)
            except Exception as e:  # never let the decode thread die: fail what was in flight
                log.error("engine step failed", error=repr(e))
                self._fail_all(EngineError(f"engine step failed: {e!r}"), keep_waiting=True)
                self._forget_caches()

    def _admit(self) -> None:
        """Give waiting sequences a slot, in arrival order, while slots are free."""
        self._blocked = False
        while self._waiting:
            seq = self._waiting[0]
            if seq.request.stop_event.is_set():
                self._waiting.popleft()
                self._finish(seq, "aborted")
                continue
            if all(s.busy for s in self.slots):
                return
            if self._spell is not None and seq.fetch is None:  # just before placing, against the caches as they are now
                holders = list(self.slots)
                saved = self.tiers.best(seq.prompt) if self.tiers is not None else None
                if saved is not None:  # a saved state's tokens spell its reply as the model wrote it
                    holders.append(Slot(-1, saved[0].tokens))
                seq.use_prompt(respell(holders, seq.prompt, self._spell, room=seq.context_left - 1))
            placement = place(self.slots, seq.prompt)
            if placement is None:
                return
            restore = self._from_tiers(seq, placement.keep) if self.tiers is not None else None
            if restore is _WAIT:
                self._blocked = True
                return
            keep = 0 if restore is not None or placement.copy_from is not None else placement.keep
            if not self._saved_before_losing(placement.slot, seq.prompt, keep):
                return  # its slot's state is still on its way out, in pieces between steps
            self._waiting.popleft()
            slot = placement.slot
            if restore is not None:
                keep, source = self._restore(slot, seq, restore)
            else:
                keep, source = self._apply(placement, seq)
            self._clock += 1
            slot.busy, slot.last_used = True, self._clock
            seq.slot = slot
            self.stats.prompt_tokens += len(seq.prompt)
            self._count_cached(seq, keep, source)
            seq.pending = seq.prompt[keep:]
            try:
                seq.chain = TokenSampler.chain(seq.request.temperature, seq.seed)
                if seq.request.grammar is not None:
                    seq.grammar = self._sampler.grammar(seq.request.grammar, seq.request.grammar_trigger)
                    if self.jump_forward and self._tokenize is not None:
                        seq.forced = _follow(seq.request.grammar)
            except EngineError as e:
                self._finish(seq, error=e)
                continue
            self._running.append(seq)
            self._count()

    def _count_cached(self, seq: Sequence, keep: int, source: str, *, undo: bool = False) -> None:
        """The prompt tokens a cache serves it, in its result and the engine's counters; ``undo``
        takes back what a restore that failed half way had counted."""
        if undo:
            if seq.cached:
                self.stats.cache.hits[source] = self.stats.cache.hits.get(source, 1) - 1
                self.stats.cached_tokens -= seq.cached
            seq.cached, seq.cached_by = 0, {}
            return
        seq.cached = keep
        seq.cached_by = {source: keep} if keep else {}
        if keep:
            self.stats.cache.hits[source] = self.stats.cache.hits.get(source, 0) + 1
        self.stats.cached_tokens += keep

    def _apply(self, placement: Placement, seq: Sequence) -> tuple[int, str]:
        """Put a slot placement into the context: the copy from another slot, the cut after the
        kept prefix. The tokens kept and their source."""
        slot = placement.slot
        if placement.copy_from is not None:
            llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, 0, -1)
            llama_cpp.llama_memory_seq_cp(self._mem, placement.copy_from.seq_id, slot.seq_id, 0, placement.keep)
            slot.tokens = placement.copy_from.tokens[: placement.keep]
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, placement.keep, -1)
        del slot.tokens[placement.keep :]
        return placement.keep, "slot" if placement.copy_from is None else "slot_copy"

    def _from_tiers(self, seq: Sequence, keep: int) -> Any:
        """(source, tokens, shared, payload) of a saved state that serves more of the prompt than
        the slots (``keep`` tokens); _WAIT while it is read from disk; None."""
        assert self.tiers is not None
        cache = self.stats.cache
        found = self.tiers.best(seq.prompt)
        shared = min(found[1], len(seq.prompt) - 1) if found is not None else 0
        if found is None or shared < keep + MIN_RESTORE_GAIN:
            if len(seq.prompt) - keep >= self.tiers.block:  # a prompt a tier could have served
                for tier in ("host", "disk"):
                    cache.misses[tier] = cache.misses.get(tier, 0) + 1
            seq.fetch = None
            return None
        entry = found[0]
        if seq.fetch is not None and seq.fetch[0] == entry.key:
            if not seq.fetch[1].done():
                return _WAIT
            payload, source = seq.fetch[1].result(), "disk"
            seq.fetch = None
        elif entry.tier == "host":
            payload, source = self.tiers.take_host(entry.key), "host"
        else:
            seq.fetch = (entry.key, self.tiers.fetch(entry.key))
            return _WAIT
        if payload is None:  # dropped meanwhile, or a file that failed its checks
            return None
        if source == "disk":
            cache.misses["host"] = cache.misses.get("host", 0) + 1
        return source, entry.tokens, shared, payload

    def _restore(self, slot: Slot, seq: Sequence, restore: tuple[str, list[int], int, bytearray]) -> tuple[int, str]:
        """Begin setting a saved state into the slot: its pieces go in between steps
        (_restore_some), and the sequence joins the steps once they are all in."""
        source, tokens, shared, payload = restore
        clear(self._ctx, slot.seq_id)
        slot.tokens = []  # until the last piece is in, no other prompt may copy from these cells
        seq.restoring = PiecewiseRestore.begin(slot.seq_id, payload, list(tokens[:shared]), source)
        if seq.restoring is None:
            log.warning("saved state not restored: its pieces do not add up", source=source, tokens=len(tokens))
            return 0, source
        return shared, source

    def _restore_some(self) -> None:
        """Set pieces of the restore under way for what the pace of the steps allows (all of it
        when nothing else decodes); a sequence whose state is all in joins the steps."""
        seq = next((s for s in self._running if s.restoring is not None), None)
        if seq is None:
            return
        r: PiecewiseRestore = seq.restoring
        try:
            spent = r.restore(
                self._ctx, self._spare_id, self._pace.budget(any(s.restoring is None for s in self._running))
            )
            self.stats.cache.timings.append(("restore", r.source, spent))
        except Exception as e:  # the cache is an optimisation: evaluate the prompt instead
            log.warning("saved state not restored", error=repr(e))
            r.failed = True
        if not r.done:
            return
        seq.restoring = None
        slot = seq.slot
        assert slot is not None
        if r.failed:
            log.warning("saved state not restored", source=r.source, tokens=len(r.tokens))
            clear(self._ctx, slot.seq_id)
            self._count_cached(seq, 0, r.source, undo=True)
            seq.pending = list(seq.prompt)
            return
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, len(r.tokens), -1)
        slot.tokens = r.tokens

    def _save_one(self) -> bool:
        """While idle: one piece of the save under way, or begin saving a free slot whose state is
        unsaved; whether there was work."""
        try:
            if self._saving is not None:
                self._save_some(self._pace.budget(True))  # about half a step, then a look at the inbox
                return True
            slot = next((s for s in self.slots if s.unsaved and not s.busy), None)
            if slot is None:
                return False
            self._begin_save(slot, idle=True)
        except Exception as e:  # the cache is an optimisation: never let it stop the engine
            log.warning("state not saved", error=repr(e))
            self._saving = self._saving_slot = None
        return True

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

    def _save_some(self, budget_s: float | None = None) -> None:
        """Copy pieces of the save under way for about ``budget_s`` (default: what the pace of the
        steps allows, all of it when nothing decodes; at least one piece); hand the state to the
        tiers once it is all out."""
        saving = self._saving
        assert saving is not None and self.tiers is not None
        if budget_s is None:
            budget_s = self._pace.budget(bool(self._running))
        try:
            spent = saving.copy(self._ctx, self._spare_id, budget_s)
        except Exception as e:  # the cache is an optimisation: never let it stop the engine
            log.warning("state not saved", error=repr(e))
            self._saving = self._saving_slot = None
            return
        self.stats.cache.timings.append(("save", "copy", spent))
        if saving.done:
            self._saving = self._saving_slot = None
            self.tiers.save(saving.tokens, saving.payload())

    def _saved_before_losing(self, slot: Slot, prompt: list[int], keep: int) -> bool:
        """Whether ``prompt`` may take ``slot`` now, keeping ``keep`` of its tokens. A placement that
        throws some of the slot's state away (an eviction) waits until that state is saved, which
        goes on in pieces between steps while other slots decode; one save at a time."""
        loses = len(slot.tokens) > min(keep, common_prefix(slot.tokens, prompt))
        if loses and self._saving_slot is not slot:
            if self._saving is not None:
                if not self._covered(slot):
                    return False  # after the save under way (_run moves it on)
            else:
                try:
                    self._begin_save(slot)
                except Exception as e:  # the cache is an optimisation: never let it stop the engine
                    log.warning("state not saved", error=repr(e))
        if loses and self._saving_slot is slot:
            return False  # its positions are still being copied (_run moves the save on)
        # appending to a slot whose save is under way is safe: the save copies the positions it began with
        slot.unsaved = False  # what it keeps is the new prompt's: saved when that one ends
        return True

    def _covered(self, slot: Slot) -> bool:
        return self.tiers is None or self.tiers.covers(slot.tokens)

    def _step(self) -> bool:
        """One decode over every running sequence's next tokens; whether there were any."""
        for seq in [s for s in self._running if s.request.stop_event.is_set()]:
            self._finish(seq, "aborted")
        if not self._running:
            return False
        batch = self._batch
        n = 0
        outputs: list[tuple[Sequence, int]] = []
        fed: list[tuple[Sequence, list[int]]] = []
        for seq in self._running:
            if seq.next_token is not None:
                self._put(n, seq.next_token, len(seq.slot.tokens), seq.slot.seq_id, True)  # type: ignore[union-attr]
                outputs.append((seq, n))
                fed.append((seq, [seq.next_token]))
                seq.next_token = None
                n += 1
        n_generated = n
        # While sequences are generating, each step carries at most prefill_chunk prompt tokens,
        # so one step (and so a cancel, or the next token of every generating sequence) never
        # waits long behind a long prompt; with nothing generating, prompts take the whole batch.
        room = min(self.n_batch, n + self.prefill_chunk) if n else self.n_batch
        for seq in self._running:
            if n >= room:
                break
            if not seq.pending or seq.restoring is not None:
                continue
            chunk = seq.pending[: room - n]
            if seq.prompted:  # forced text after the prompt: generated tokens, evaluated as a chunk
                n_generated += len(chunk)
            base = len(seq.slot.tokens)  # type: ignore[union-attr]
            last = len(chunk) == len(seq.pending)
            for i, token in enumerate(chunk):
                self._put(n, token, base + i, seq.slot.seq_id, last and i == len(chunk) - 1)  # type: ignore[union-attr]
                n += 1
            if last:
                outputs.append((seq, n - 1))
            fed.append((seq, chunk))
        if n == 0:  # every running sequence waits for its saved state to be set
            return False
        batch.n_tokens = n
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, batch)
        elapsed = time.perf_counter() - t0
        if rc != 0:
            # The cache of the sequences in this batch is in an unknown state: fail them and
            # forget their caches rather than reuse a broken prefix.
            for seq, _ in fed:
                self._finish(seq, error=EngineError(f"llama_decode failed with code {rc}"), broken=True)
            return True
        st = self.stats
        st.steps += 1
        st.batch_tokens += n
        st.batch_sequences += len(fed)
        st.decode_tokens += n_generated
        st.prefill_tokens += n - n_generated
        if n > n_generated:
            st.prefill_s += elapsed
        else:
            st.decode_s += elapsed
        for seq, tokens in fed:
            seq.slot.tokens.extend(tokens)  # type: ignore[union-attr]
            if seq.pending:
                del seq.pending[: len(tokens)]
                if not seq.pending:
                    seq.prompt_done()
        for seq, idx in outputs:
            if seq.budget <= 0:
                self._finish(seq, "length")
                continue
            try:
                token = self._sampler.sample(seq.chain, seq.grammar, idx)
                reason = seq.accept(token, is_eog=self._is_eog(token), piece=self._piece)
                if reason is None and seq.forced is not None:
                    reason = self._jump(seq)
            except EngineError as e:
                self._finish(seq, error=e)
                continue
            if reason is not None:
                self._finish(seq, reason)
        return True

    def _jump(self, seq: Sequence) -> Any:
        """Write the text the grammar forces next without sampling it: its tokens join the
        sampled one as a chunk, evaluated in one step, not one step each. The last token of the
        forced text is left to the model, which may join it with what follows. Each token is
        checked against llama.cpp's grammar first. Returns a stop reason, or None."""
        text = seq.forced_text()
        if len(text) < 2:
            return None
        assert self._tokenize is not None
        forced = self._tokenize(text)[:-1]
        sampled = seq.next_token
        fed: list[int] = []
        for token in forced:
            if not self._sampler.allows(seq.grammar, token):
                break
            TokenSampler.take(seq.chain, seq.grammar, token)
            reason = seq.accept(token, is_eog=False, piece=self._piece)
            if reason is not None:
                return reason
            fed.append(token)
        if fed and sampled is not None:
            seq.next_token = None
            seq.pending = [sampled, *fed]
            self.stats.forced_tokens += len(fed)
        return None

    def _put(self, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        b = self._batch
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq_id
        b.logits[i] = logits

    # ------------------------------------------------------------------ endings

    def _finish(
        self, seq: Sequence, reason: Any = None, *, error: Exception | None = None, broken: bool = False
    ) -> None:
        if seq in self._running:
            self._running.remove(seq)
        self._count()
        slot = seq.slot
        if slot is not None and seq.restoring is not None:  # given up half way through its restore
            seq.restoring = None
            clear(self._ctx, slot.seq_id)
            slot.tokens = []
            slot.busy = False
        elif slot is not None:
            if broken:
                llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, 0, -1)
                slot.tokens = []
            elif error is None and self.tiers is not None:
                # a paused or ended conversation: its next round may come after the slot is gone.
                # Saved when the slot is given to another prompt, when the engine is idle, or at
                # close, not now: a job's rounds follow each other in the same slot, and each
                # copy stalls the other slots' step.
                slot.unsaved = True
            slot.busy = False
        TokenSampler.free(seq.chain)
        TokenSampler.free(seq.grammar)
        seq.chain = seq.grammar = None
        if seq.future.done():
            return
        if error is not None:
            seq.future.set_exception(error)
        else:
            try:
                result: GenerationResult = seq.result(reason)
            except Exception as e:  # an on_text callback that raised
                seq.future.set_exception(e)
                return
            seq.future.set_result(result)

    def _count(self) -> None:
        # before a future is settled, so a caller that sees its result sees the counts after it
        self.stats.busy = len(self._running)
        self.stats.waiting = len(self._waiting)

    def _fail_all(self, error: Exception, *, keep_waiting: bool = False) -> None:
        for seq in list(self._running):
            self._finish(seq, error=error)
        if not keep_waiting:
            while self._waiting:
                self._finish(self._waiting.popleft(), error=error)

    def _forget_caches(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self._saving = self._saving_slot = None
        for seq in self._running:
            seq.restoring = None
        for slot in self.slots:
            slot.tokens = []
            slot.busy = False
