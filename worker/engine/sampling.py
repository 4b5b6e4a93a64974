"""Sampling one token of one sequence: llama.cpp's sampler chain, with its grammar kept apart.

The order is llama.cpp's own common sampler's (common/sampling.cpp): the chain picks a token with
no grammar in it; the grammar checks that one token (a one-token apply); only when it refuses is
the grammar applied to candidates first and the chain run again, on the model's top 64 tokens and,
when none of them is allowed, on the whole vocabulary (a full pass costs ~15 ms a token on a 49k
vocabulary, a top-64 pass microseconds). The token is then accepted once into each. Where no token
at all is allowed, the sequence ends with GrammarDeadEnd; the others in the batch go on.

A grammar is a GuardedGrammar (worker/engine/guarded_grammar.py), which feeds llama.cpp's grammar
only tokens it has just allowed, and finds a lazy grammar's trigger itself: while it waits, a
token that would complete the trigger with text the grammar refuses is dropped from the
candidates like a masked one. Why: llama.cpp's grammar aborts the process on a token it refuses
(DESIGN.md, "Facts for isolation"), and nothing in Python can catch that.

The chain runs on the top 64 candidates even without a grammar refusing: its top-k of 40 keeps
only tokens among them, so the draw is the one a full pass would make. Each sequence has its own
chain and grammar; the buffers here are shared, which is safe because only the scheduler's one
thread samples.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

from worker.engine.guarded_grammar import GuardedGrammar
from worker.generation import EngineError
from worker.grammar.errors import GrammarDeadEnd

_token_data_dtype = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
TOP_K = 64  # candidates tried before a grammar is applied to the whole vocabulary
_CHAIN_TOP_K = 40  # the chain's own top-k: at most TOP_K, so a top-64 draw is a full draw


class TokenSampler:
    def __init__(self, ctx: Any, vocab: Any, n_vocab: int):
        self._ctx = ctx
        self._vocab = vocab
        self.n_vocab = n_vocab
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._candidates = np.zeros(n_vocab, dtype=_token_data_dtype)
        self._top = np.zeros(TOP_K, dtype=_token_data_dtype)
        self._pieces: dict[int, bytes] = {}

    # ------------------------------------------------------------------ per-sequence samplers

    @staticmethod
    def chain(temperature: float, seed: int) -> Any:
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if temperature <= 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(_CHAIN_TOP_K))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(0.95, 1))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(temperature))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def grammar(self, gbnf: str, trigger: str | None) -> GuardedGrammar:
        """A sequence's grammar; the grammar text must have passed check_grammar. Always a plain
        grammar to llama.cpp: a trigger is watched for in GuardedGrammar."""
        smpl = llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not smpl:
            raise EngineError("llama.cpp rejected the grammar")
        return GuardedGrammar(smpl, trigger, piece=self.piece, spell=self.spell, is_eog=self.is_eog)

    @staticmethod
    def free(smpl: Any) -> None:
        if isinstance(smpl, GuardedGrammar):
            smpl.close()
        elif smpl:
            llama_cpp.llama_sampler_free(smpl)

    # ------------------------------------------------------------------ tokens as the grammar reads them

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def piece(self, token: int) -> bytes:
        """A token's text as llama.cpp's grammar reads it (special tokens spelled out)."""
        found = self._pieces.get(token)
        if found is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
            found = self._pieces[token] = buf.raw[: max(n, 0)]
        return found

    def spell(self, text: bytes) -> list[int] | None:
        """Tokens whose pieces spell exactly ``text``, or None. A tokenizer that adds a space
        before the text's start is given a newline to put it on, and the tokens of that dropped."""
        for lead in (b"", b"\n"):
            tokens = self._tokenize(lead + text)
            spelled = b""
            for i, t in enumerate(tokens):
                if spelled in (lead, b" " + lead) and b"".join(self.piece(u) for u in tokens[i:]) == text:
                    return tokens[i:] or None
                spelled += self.piece(t)
        return None

    def _tokenize(self, data: bytes) -> list[int]:
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, False, True)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, False, True)
        return list(buf[: max(n, 0)])

    # ------------------------------------------------------------------ one token

    def sample(self, chain: Any, grammar: GuardedGrammar | None, idx: int) -> int:
        """The next token of the sequence whose logits are at batch index ``idx``, accepted once
        into its chain and its grammar. GrammarDeadEnd when the grammar allows none."""
        if grammar is None:
            return int(llama_cpp.llama_sampler_sample(chain, self._ctx, idx))  # the chain accepts it
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, idx), shape=(self.n_vocab,))
        top = np.argpartition(logits, -TOP_K)[-TOP_K:]
        self._top["id"] = top
        self._top["logit"] = logits[top]
        self._top["p"] = 0.0
        if grammar.waiting:
            token = self._before_trigger(chain, grammar)
        else:
            picked = self._pick(chain, self._top.copy(), None)
            token = (
                picked if picked is not None and grammar.allows(picked) else self._constrained(chain, grammar, logits)
            )
            if not self.is_eog(token):  # an end-of-generation token ends the sequence: never fed
                grammar.accept(token)
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    def allows(self, grammar: GuardedGrammar, token: int) -> bool:
        """Whether the grammar, where it stands, lets ``token`` come next."""
        return grammar.allows(token)

    @staticmethod
    def take(chain: Any, grammar: GuardedGrammar, token: int) -> None:
        """A token the sequence writes without sampling (forced by its grammar): both samplers
        move past it, as they do past a sampled one. The grammar checks it first."""
        grammar.accept(token)
        llama_cpp.llama_sampler_accept(chain, token)

    def _before_trigger(self, chain: Any, grammar: GuardedGrammar) -> int:
        """A token while a lazy grammar waits: free, except that a token completing the trigger
        must leave text the grammar takes."""
        token = self._pick(chain, self._top.copy(), None)
        if token is None:
            raise EngineError("the sampler chain selected no token")
        if not grammar.completes(token):
            grammar.wait_past(token)
            return token
        trial = grammar.start(token)
        if trial is not None:
            grammar.begin(trial)
            return token
        # Drop every candidate that would complete the trigger with text the grammar refuses.
        few = self._top.copy()
        trials: dict[int, Any] = {}
        for i in range(len(few)):
            t = int(few["id"][i])
            if grammar.completes(t):
                trials[t] = grammar.start(t)
                if trials[t] is None:
                    few["logit"][i] = -np.inf
        token = self._pick(chain, few, None)
        for t, tr in trials.items():
            if t != token:
                GuardedGrammar.discard(tr)
        if token is None:
            raise GrammarDeadEnd("every likely token opens a call with text its grammar refuses")
        if trials.get(token) is not None:
            grammar.begin(trials[token])
        else:
            grammar.wait_past(token)
        return token

    def _constrained(self, chain: Any, grammar: GuardedGrammar, logits: np.ndarray) -> int:
        """The chain's token among those the grammar allows: the top candidates first, then the
        whole vocabulary."""
        token = self._pick(chain, self._top.copy(), grammar.smpl)
        if token is None:
            cand = self._candidates
            cand["id"] = self._ids  # a chain's top-k sorts the entries in place
            cand["logit"] = logits
            cand["p"] = 0.0
            token = self._pick(chain, cand, grammar.smpl)
        if token is None:
            raise GrammarDeadEnd("no token satisfies the grammar where the output stands")
        return token

    @staticmethod
    def _pick(chain: Any, cand: np.ndarray, grammar: Any) -> int | None:
        """Apply the grammar (if any), then the chain, to ``cand``; the selected token, or None
        when no candidate is left."""
        n = len(cand)
        arr = llama_cpp.llama_token_data_array(cand.ctypes.data_as(llama_cpp.llama_token_data_p), n, -1, False)
        if grammar is not None:
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(arr))
        if not np.isfinite(cand["logit"][:n]).any():
            return None
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        if arr.selected < 0:
            return None
        # samplers may have moved the data pointer; read the selected entry through it
        return int(arr.data[arr.selected].id)
