"""One generation in flight: its state, its prompt, its samplers, and the text it has produced so far.

The scheduler (worker/engine/scheduler.py) feeds its prompt in chunks, then one sampled token a
step, and asks ``accept`` after each sampled token whether the generation is done: an
end-of-generation token, a stop string, the caller's ``stop_check``, or the token budget. Stop
strings are held back from ``on_text`` until they can no longer start, so a streamed reply never
shows the beginning of a stop string that is then cut.

Its ``state`` is one of ``State`` (the transitions are drawn in docs/architecture/worker.md,
"sequence.py"):

    WAITING ──placed──▶ PREFILLING ──last prompt token──▶ GENERATING ──stop, length, cancel──▶ DONE
       │                    ▲                                  │
       └─saved state─▶ RESTORING (pieces in between steps)     │ its tenant over its share
                            ▲                                  ▼
                            └──────── placed again ◀──── SET_ASIDE (its cells in its slot or the tiers)
"""

from __future__ import annotations

import codecs
import enum
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from worker.engine.slots import Slot
from worker.generation import GenerationRequest, GenerationResult, StopReason
from worker.grammar.forced import Forced


class State(enum.Enum):
    WAITING = "waiting"  # queued for a slot (a saved state may be read from disk for it meanwhile)
    RESTORING = "restoring"  # in its slot, a saved state's pieces going in between steps
    PREFILLING = "prefilling"  # prompt tokens to evaluate, a chunk a step
    GENERATING = "generating"  # a sampled token (or forced text) to feed each step
    SET_ASIDE = "set_aside"  # its tenant was over its share: queued again, its cells kept
    DONE = "done"


# The states of a sequence that holds a slot
IN_SLOT = (State.RESTORING, State.PREFILLING, State.GENERATING)


class Generation:
    def __init__(
        self,
        request: GenerationRequest,
        future: Future[GenerationResult],
        prompt: list[int],
        budget: int,
        seed: int = 0,
        context_left: int | None = None,
    ):
        self.request = request
        self.future = future
        self.prompt = prompt
        self.budget = budget  # tokens it may generate: max_tokens, and what the slot's context has left
        self.context_left = budget if context_left is None else context_left  # n_ctx - len(prompt)
        self.seed = seed
        self.state = State.WAITING
        self.tenant = request.tenant
        self.weight = request.weight
        self.admitted = 0  # the engine's clock when it last took a slot (the youngest gives way first)
        self.slot: Slot | None = None
        self.cached = 0  # prompt tokens reused from a cache
        self.cached_by: dict[str, int] = {}  # the same, by source (slot, slot_copy, host, disk)
        # (key, future) of a saved state the tiers read from disk for this prompt
        self.fetch: tuple[str, Future[bytearray | None]] | None = None
        self.pending: list[int] = []  # prompt (or forced) tokens still to evaluate
        self.resume: list[int] = []  # SET_ASIDE: the tokens it held and had to feed
        self.restoring: Any = None  # in RESTORING: the saved state being set (tiers/piecewise.py)
        self.next_token: int | None = None  # sampled, to be fed to the model in the next step
        self.chain: Any = None
        self.grammar: Any = None
        self.forced: Forced | None = None  # follows the text through a full grammar (worker/grammar/forced.py)
        # how much of ``text`` it has followed; -1: a lazy grammar whose trigger has not come yet
        self._forced_at = -1 if request.grammar_trigger else 0
        self._trigger_from = 0  # where to look for the trigger next
        self.text = ""
        self.n_out = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in request.stop if s]
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._emitted = 0
        self._t_start = time.perf_counter()
        self._t_prompt_done: float | None = None

    def set_aside(self) -> None:
        """Leave its slot, keeping what it has written: ``resume`` is what to place again (all it
        has fed, then what it has still to feed). Placed again, only what the slot or the tiers
        no longer hold is evaluated, and the last of it gives the next sample."""
        assert self.slot is not None
        self.resume = [*self.slot.tokens, *([self.next_token] if self.next_token is not None else []), *self.pending]
        self.next_token, self.pending, self.slot = None, [], None
        self.state = State.SET_ASIDE

    @property
    def has_tokens(self) -> bool:
        """Whether it has tokens to feed the next step."""
        return self.next_token is not None or bool(self.pending)

    @property
    def placing(self) -> list[int]:
        """The tokens its placement matches against the caches: the prompt, or once it has been
        set aside, all it had then."""
        return self.resume or self.prompt

    def use_prompt(self, prompt: list[int]) -> None:
        """Take a respelled prompt (worker/engine/respell.py): the same text, maybe more tokens."""
        self.context_left -= len(prompt) - len(self.prompt)
        self.budget = min(self.budget, self.context_left)
        self.prompt = prompt

    @property
    def prompted(self) -> bool:
        """Whether the prompt has been evaluated (pending tokens now are forced text)."""
        return self._t_prompt_done is not None

    def prompt_done(self) -> None:
        if self._t_prompt_done is None:  # once: forced text is fed the same way later
            self._t_prompt_done = time.perf_counter()

    def accept(self, token: int, *, is_eog: bool, piece: Callable[[int], bytes]) -> StopReason | None:
        """Take a sampled token; the reason the generation ends with it, or None to go on."""
        if is_eog:
            return "stop"
        self.n_out += 1
        self.text += self._decoder.decode(piece(token))
        if self._stops:
            start = max(0, self._emitted - self._hold)
            hits = [i for i in (self.text.find(s, start) for s in self._stops) if i >= 0]
            if hits:
                self.text = self.text[: min(hits)]
                return "stop"
        check = self.request.stop_check
        if check is not None and check(self.text):
            return "stop"
        if self.request.on_text is not None:
            upto = len(self.text) - self._hold if self._stops else len(self.text)
            if upto > self._emitted:
                self.request.on_text(self.text[self._emitted : upto])
                self._emitted = upto
        if self.n_out >= self.budget:
            return "length"
        self.next_token = token
        return None

    def forced_text(self) -> str:
        """What the grammar makes the next characters, given the text so far ("" if anything
        may follow)."""
        if self.forced is None:
            return ""
        if self._forced_at < 0:  # a lazy grammar: it starts at the trigger's first occurrence
            trigger = self.request.grammar_trigger or ""
            start = self.text.find(trigger, self._trigger_from)
            if start < 0:
                # only the text after this could still hold it: each token is searched once
                self._trigger_from = max(0, len(self.text) - len(trigger) + 1)
                return ""
            self._forced_at = start
        self.forced.feed(self.text[self._forced_at :])
        self._forced_at = len(self.text)
        return self.forced.next_text()

    def result(self, reason: StopReason) -> GenerationResult:
        self.text += self._decoder.decode(b"", final=True)
        if self.request.on_text is not None and len(self.text) > self._emitted:
            self.request.on_text(self.text[self._emitted :])
            self._emitted = len(self.text)
        now = time.perf_counter()
        prompt_done = self._t_prompt_done or now
        return GenerationResult(
            self.text,
            reason,
            len(self.prompt),
            self.cached,
            self.n_out,
            (prompt_done - self._t_start) * 1000,
            (now - prompt_done) * 1000,
            cached_by_source=dict(self.cached_by),
        )
