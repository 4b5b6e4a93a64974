"""Continuous batching: one thread, one llama.cpp context, every active sequence in each step.

A llama.cpp context is not thread-safe, so one thread owns it. Each pass of the loop:

1. takes new requests from the inbox (they wait in ``_waiting``);
2. admits waiting sequences into free slots, the backlogged tenant with the lowest virtual token
   counter first (worker/engine/fairness.py); a tenant that waits with fewer slots than its share
   while another holds more than its own has one of the other's sequences set aside for it;
3. asks the keeper of saved state (worker/engine/keeper.py) to move its save or restore on,
   within a share of a step;
4. steps: one ``llama_decode`` over the next token of every generating sequence, then prompt
   chunks of prefilling ones, up to ``n_batch`` tokens (at most ``prefill_chunk`` prompt tokens
   while others generate, so a long prompt never holds the others back for more than a step);
   between tenants, one whose counter is a quantum ahead of the lowest sits the step out, and a
   prompt chunk takes no more than its tenant's room; then each sequence that finished its
   tokens samples its next one with its own sampler chain and grammar.

A finished sequence leaves at once; a stop flag (cancel, timeout) ends its sequence within a
step. Where a prompt goes is worker/engine/slots.py; a sequence's states, sequence.py's ``State``.
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

from worker.engine.batch import StepBatch
from worker.engine.fairness import GENERATED_COST, PROMPT_COST, TokenCounters, first_in_line, gives_way
from worker.engine.jump import follower, jump
from worker.engine.keeper import WAIT, StateKeeper
from worker.engine.respell import respell
from worker.engine.sampling import TokenSampler
from worker.engine.sequence import IN_SLOT, Generation, State
from worker.engine.slots import Placement, Slot, place
from worker.engine.tiers import TieredStore
from worker.engine.tiers.piecewise import PIECE_TOKENS
from worker.generation import EngineError, EngineStats, GenerationResult

log = structlog.get_logger("worker.engine")

_CLOSE = object()


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
        fair: bool = True,
    ):
        """The context has ``slots + 1`` sequence ids: one per slot, and a spare one that a save
        or restore in pieces passes through (worker/engine/tiers/llama_state.py). ``fair``: share
        the batch between tenants by their counters; off, first come first served."""
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
        self.stats = EngineStats(slots=slots)
        self.keeper = StateKeeper(
            ctx, tiers, self.slots, self.stats, piece_tokens=piece_tokens, piece_share=piece_share
        )
        self.counters = TokenCounters() if fair else None
        self._weights: dict[str, float] = {}
        self._batch = StepBatch(n_batch)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting: deque[Generation] = deque()
        self._running: list[Generation] = []
        self._clock = 0
        self._closed = False
        self._blocked = False  # the queue waits on a disk read
        self._owed: Generation | None = None  # a slot was set free for it: it goes first
        self._thread = threading.Thread(target=self._run, name="llama-batch", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ from other threads

    def submit(self, seq: Generation) -> None:
        if self._closed:
            raise EngineError("the engine is closed")
        self._inbox.put(seq)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_CLOSE)
        self._thread.join()
        self._batch.free()

    # ------------------------------------------------------------------ the decode thread

    def _run(self) -> None:
        while True:
            if not self._running and not self._waiting:
                # idle: keep what the slots hold, one piece of work between looks at the inbox
                item = self._poll(0) if self.keeper.idle() else self._inbox.get()
            elif not self._running and self._blocked:  # only a disk read to wait for: poll gently
                item = self._poll(0.002)
            else:
                item = self._poll(0)
            while item is not None:
                if item is _CLOSE:
                    self._fail_all(EngineError("the engine is closed"))
                    self.keeper.save_all()  # a clean stop keeps every conversation for the next start
                    return
                self._arrive(item)
                item = self._poll(0)
            try:
                self._admit()
                self.keeper.between_steps(self._running, bool(self._waiting))
                t0 = time.perf_counter()
                if self._running and self._step():
                    self.keeper.stepped(time.perf_counter() - t0)
            except Exception as e:  # never let the decode thread die: fail what was in flight
                log.error("engine step failed", error=repr(e))
                self._fail_all(EngineError(f"engine step failed: {e!r}"), keep_waiting=True)
                self._forget_caches()

    def _poll(self, timeout: float) -> Any:  # the next item of the inbox, or None
        try:
            return self._inbox.get(timeout=timeout) if timeout else self._inbox.get_nowait()
        except queue.Empty:
            return None

    def _arrive(self, seq: Generation) -> None:
        self._waiting.append(seq)
        self._weights[seq.tenant] = seq.weight
        if self.counters is not None:
            self.counters.arrive(seq.tenant)
        self._count()

    # ------------------------------------------------------------------ admission

    def _admit(self) -> None:
        """Give waiting sequences a slot while slots are free (or set free for a tenant below its
        share, whose sequence is then owed it): the lowest counter's tenant first, in order."""
        self._blocked = False
        for seq in [s for s in self._waiting if s.request.stop_event.is_set()]:
            self._waiting.remove(seq)
            self._finish(seq, "aborted")
        while self._waiting:
            owed = self._owed if self._owed in self._waiting else None
            seq = owed or first_in_line(self.counters, self._waiting)
            if all(s.busy for s in self.slots) and not self._set_aside_for(seq):
                return
            resumed = seq.state is State.SET_ASIDE
            if self._spell is not None and not resumed and seq.fetch is None:
                # just before placing, against the caches as they are now; a saved state's tokens
                # spell its reply as the model wrote it
                holders = [*self.slots, *filter(None, [self.keeper.best(seq.prompt)])]
                seq.use_prompt(respell(holders, seq.prompt, self._spell, room=seq.context_left - 1))
            tokens = seq.placing
            placement = place(self.slots, tokens, self.counters.spare(seq.tenant) if self.counters else None)
            if placement is None:
                return
            found = self.keeper.find(seq, tokens, placement.keep)
            if found is WAIT:
                self._blocked = True
                return
            keep = 0 if found is not None or placement.copy_from is not None else placement.keep
            if not self.keeper.may_take(placement.slot, tokens, keep):
                return  # its slot's state is still on its way out, in pieces between steps
            self._waiting.remove(seq)
            slot = placement.slot
            seq.slot, seq.state = slot, State.GENERATING if seq.prompted else State.PREFILLING
            if found is not None:
                keep, source = self.keeper.begin_restore(slot, seq, found)  # type: ignore[arg-type]
            else:
                keep, source = self._apply(placement)
            self._clock += 1
            slot.busy, slot.last_used, slot.tenant, seq.admitted = True, self._clock, seq.tenant, self._clock
            seq.pending = tokens[keep:]
            self._running.append(seq)
            self._count()
            if resumed:
                continue  # its samplers and counts carry on
            self.stats.prompt_tokens += len(seq.prompt)
            self.keeper.count(seq, keep, source)
            try:
                seq.chain = TokenSampler.chain(seq.request.temperature, seq.seed)
                if seq.request.grammar is not None:
                    seq.grammar = self._sampler.grammar(seq.request.grammar, seq.request.grammar_trigger)
                    if self.jump_forward and self._tokenize is not None:
                        seq.forced = follower(seq.request.grammar)
            except EngineError as e:
                self._finish(seq, error=e)

    def _set_aside_for(self, seq: Generation) -> bool:
        """Free a slot for ``seq`` when its tenant holds fewer than its share and another holds
        more (worker/engine/fairness.py ``gives_way``): that tenant's youngest sequence in a step
        leaves its slot at this step boundary, its cells kept (in the slot until another prompt
        takes it, then in the tiers: the keeper saves them first), and waits first in line."""
        if self.counters is None:
            return False
        held: dict[str, int] = {}
        for s in self._running:
            held[s.tenant] = held.get(s.tenant, 0) + 1
        active = {s.tenant: self._weights[s.tenant] for s in (*self._running, *self._waiting)}
        tenant = gives_way(held, active, seq.tenant, len(self.slots))
        movable = [s for s in self._running if s.tenant == tenant and s.state is not State.RESTORING]
        if not movable:
            return False
        victim = max(movable, key=lambda s: s.admitted)
        slot = victim.slot
        assert slot is not None
        victim.set_aside()
        self._running.remove(victim)
        self._waiting.appendleft(victim)
        slot.busy, slot.unsaved = False, self.tiers is not None
        self.stats.set_aside += 1
        self._owed = seq
        self._count()
        return True

    def _apply(self, placement: Placement) -> tuple[int, str]:
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

    # ------------------------------------------------------------------ the step

    def _step(self) -> bool:
        """One decode over the running sequences' next tokens, as the counters allow; whether
        there were any."""
        for seq in [s for s in self._running if s.request.stop_event.is_set()]:
            self._finish(seq, "aborted")
        feeding = [s for s in self._running if s.state is not State.RESTORING and s.has_tokens]
        # the prompt tokens each tenant may put in this step (0 or less: it sits the step out)
        tenants = {s.tenant: s.weight for s in feeding}
        rooms = self.counters.rooms(tenants) if self.counters else dict.fromkeys(tenants, float("inf"))
        batch = self._batch
        batch.begin()
        for seq in feeding:
            if seq.next_token is not None and rooms[seq.tenant] > 0:
                rooms[seq.tenant] -= GENERATED_COST / PROMPT_COST
                batch.feed(seq, [seq.next_token], sample=True)
                seq.next_token = None
        n_generated = batch.n
        # While sequences are generating (or another tenant waits to), each step carries at most
        # prefill_chunk prompt tokens, so one step (and so a cancel, or the next token of every
        # generating sequence) never waits long behind a long prompt; else prompts take it all.
        other = self.counters is not None and any(s.tenant not in tenants for s in self._waiting)
        room = min(self.n_batch, batch.n + self.prefill_chunk) if batch.n or other else self.n_batch
        for seq in feeding:
            share = rooms[seq.tenant]
            if batch.n >= room or not seq.pending or share <= 0:
                continue
            chunk = seq.pending[: room - batch.n if share == float("inf") else min(room - batch.n, max(int(share), 1))]
            if seq.prompted:  # forced text after the prompt: generated tokens, evaluated as a chunk
                n_generated += len(chunk)
            batch.feed(seq, chunk, sample=len(chunk) == len(seq.pending))
            rooms[seq.tenant] = share - len(chunk)
        if batch.n == 0:  # every running sequence waits for its saved state to be set
            return False
        t0 = time.perf_counter()
        rc = batch.decode(self._ctx)
        elapsed = time.perf_counter() - t0
        if rc != 0:
            # The cache of the sequences in this batch is in an unknown state: fail them and
            # forget their caches rather than reuse a broken prefix.
            for seq, _ in batch.fed:
                self._finish(seq, error=EngineError(f"llama_decode failed with code {rc}"), broken=True)
            return True
        self._account(batch.fed, batch.n, n_generated, elapsed)
        for seq, idx in batch.outputs:
            if seq.budget <= 0:
                self._finish(seq, "length")
                continue
            try:
                token = self._sampler.sample(seq.chain, seq.grammar, idx)
                reason = seq.accept(token, is_eog=self._is_eog(token), piece=self._piece)
                if reason is None and seq.forced is not None and self._tokenize is not None:
                    reason, forced = jump(seq, self._sampler, self._tokenize, self._piece)
                    self.stats.forced_tokens += forced
            except EngineError as e:
                self._finish(seq, error=e)
                continue
            if reason is not None:
                self._finish(seq, reason)
        return True

    def _account(self, fed: list[tuple[Generation, list[int]]], n: int, n_generated: int, elapsed: float) -> None:
        """The step's tokens: in each sequence's slot, its tenant's counter and the engine's stats."""
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
            generated = seq.prompted
            if seq.pending:
                del seq.pending[: len(tokens)]
                if not seq.pending:
                    seq.prompt_done()
                    seq.state = State.GENERATING
            else:
                generated = True
            if self.counters is not None:
                kind = "generated" if generated else "prompt"
                self.counters.charge(seq.tenant, seq.weight, **{kind: len(tokens)})

    # ------------------------------------------------------------------ endings

    def _finish(
        self, seq: Generation, reason: Any = None, *, error: Exception | None = None, broken: bool = False
    ) -> None:
        if seq in self._running:
            self._running.remove(seq)
        slot = seq.slot if seq.state in IN_SLOT else None
        if seq.state is not State.DONE and self.counters is not None:
            self.counters.leave(seq.tenant)
        if slot is not None and seq.state is State.RESTORING:  # given up half way through its restore
            self.keeper.give_up(seq)
        elif slot is not None and broken:
            llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, 0, -1)
            slot.tokens = []
        elif slot is not None and error is None and self.tiers is not None:
            # a paused or ended conversation: its next round may come after the slot is gone.
            # Saved when the slot is given to another prompt, when the engine is idle, or at
            # close, not now: a job's rounds follow each other in the same slot, and each copy
            # stalls the other slots' step.
            slot.unsaved = True
        if slot is not None:
            slot.busy = False
        seq.state = State.DONE
        self._count()
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

    def _count(self) -> None:  # before a future is settled: its caller sees the counts after it
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
        self.keeper.forget()
        for slot in self.slots:
            slot.tokens = []
            slot.busy = False
