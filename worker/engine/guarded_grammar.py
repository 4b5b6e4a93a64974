"""A llama.cpp grammar that is only ever fed tokens it has just allowed, so it can never abort.

llama.cpp's grammar cannot fail softly (DESIGN.md, "Facts for isolation"): accepting a token the
grammar does not allow stores an empty state and throws a C++ exception, which through ctypes
ends the process, and accepting an end-of-generation token into an unfinished grammar is a
``GGML_ABORT``. Every way to reach either is closed here:

- ``accept`` runs a one-token apply first (the grammar masks or keeps that one token) and accepts
  only a token the grammar keeps, once; it refuses an end-of-generation token outright, which a
  sequence never needs to feed (it ends there);
- no lazy grammar of llama.cpp's: its trigger is found here, on the tokens' text, and only then
  does a plain grammar start, fed the text from the trigger on token by token, each checked, on a
  copy (``llama_sampler_clone``) that is kept only when all of it passed. A token that completes
  the trigger with text the grammar refuses (``<tool_call>`` then ``>>``) is refused like a masked
  token, before it is written;
- the prompt, and anything else not generated under the grammar, is never fed to it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import llama_cpp

from worker.grammar.errors import GrammarDeadEnd

__all__ = ["GuardedGrammar"]


class GuardedGrammar:
    """One sequence's grammar. ``waiting``: a lazy grammar whose trigger has not come yet."""

    def __init__(
        self,
        smpl: Any,
        trigger: str | None,
        *,
        piece: Callable[[int], bytes],
        spell: Callable[[bytes], list[int] | None],
        is_eog: Callable[[int], bool],
    ):
        self._base = smpl  # never fed: a lazy grammar starts as a copy of it at the trigger
        self._active: Any = None if trigger else smpl
        self._trigger = trigger.encode("utf-8") if trigger else b""
        self._tail = b""  # the last bytes written while waiting, where a trigger may begin
        self._piece = piece  # a token's text as llama.cpp's grammar reads it (special tokens spelled)
        self._spell = spell  # tokens whose pieces spell exactly these bytes, or None
        self._is_eog = is_eog
        self._one = llama_cpp.llama_token_data_array()
        self._one_data = (llama_cpp.llama_token_data * 1)()

    @property
    def waiting(self) -> bool:
        return self._active is None

    @property
    def smpl(self) -> Any:
        """The llama.cpp sampler to apply to candidates (only while not ``waiting``)."""
        return self._active

    # ------------------------------------------------------------------ a started grammar

    def allows(self, token: int) -> bool:
        """Whether the grammar, where it stands, lets ``token`` come next (False while waiting:
        nothing is known to follow before the trigger)."""
        return self._active is not None and self._keeps(self._active, token)

    def accept(self, token: int) -> None:
        """Move past ``token``: checked first, so the grammar is never fed what it refuses. An
        end-of-generation token is never fed (llama.cpp aborts on one the grammar does not allow,
        and a sequence ends on it anyway)."""
        if self._active is None:
            if not self.completes(token):
                self.wait_past(token)
                return
            trial = self.start(token)
            if trial is None:
                raise GrammarDeadEnd("the text that opens the call is followed by text its grammar refuses")
            self.begin(trial)
            return
        if self._is_eog(token) or not self._keeps(self._active, token):
            raise GrammarDeadEnd(f"token {token} does not fit the grammar where the output stands")
        llama_cpp.llama_sampler_accept(self._active, token)

    def _keeps(self, smpl: Any, token: int) -> bool:
        one = self._one_data[0]
        one.id = token  # type: ignore[assignment]  # ctypes converts; llama_cpp annotates the field c_int32
        one.logit = 0.0
        one.p = 0.0
        self._one.data = self._one_data
        self._one.size = 1
        self._one.selected = -1
        self._one.sorted = False
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(self._one))
        return bool(self._one_data[0].logit != float("-inf"))

    # ------------------------------------------------------------------ waiting for the trigger

    def completes(self, token: int) -> bool:
        """Whether writing ``token`` now would complete the trigger."""
        return self._active is None and self._trigger in self._tail + self._piece(token)

    def start(self, token: int) -> Any:
        """The grammar as it would stand after ``token`` completes the trigger: a copy of the
        plain grammar fed the text from the trigger on, each token checked; None when the grammar
        refuses that text. Nothing is changed until ``begin`` takes the copy."""
        text = self._tail + self._piece(token)
        tokens = self._spell(text[text.find(self._trigger) :])
        if not tokens:
            return None
        trial = llama_cpp.llama_sampler_clone(self._base)
        if not trial:
            return None
        for t in tokens:
            if self._is_eog(t) or not self._keeps(trial, t):
                llama_cpp.llama_sampler_free(trial)
                return None
            llama_cpp.llama_sampler_accept(trial, t)
        return trial

    def begin(self, trial: Any) -> None:
        """The trigger came: from now on the grammar is ``trial`` (from ``start``)."""
        llama_cpp.llama_sampler_free(self._base)
        self._base = None
        self._active = trial
        self._tail = b""

    def wait_past(self, token: int) -> None:
        """``token`` was written while waiting, without completing the trigger."""
        keep = len(self._trigger) - 1
        self._tail = (self._tail + self._piece(token))[-keep:] if keep > 0 else b""

    @staticmethod
    def discard(trial: Any) -> None:
        if trial:
            llama_cpp.llama_sampler_free(trial)

    def close(self) -> None:
        for smpl in {id(s): s for s in (self._base, self._active) if s}.values():
            llama_cpp.llama_sampler_free(smpl)
        self._base = self._active = None
