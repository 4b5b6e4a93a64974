"""Sampling one token of one sequence: llama.cpp's sampler chain, and grammars on a fast path.

A grammar is checked on the sampled token only; only when that token is rejected is the grammar
applied to candidates, first to the model's top 64 tokens and only when none of them is allowed
to the whole vocabulary (a full pass costs ~15 ms a token on a 49k vocabulary, a top-64 pass
microseconds). With greedy decoding this picks exactly the token a full pass would whenever any
top candidate is allowed. Lazy grammars start at a trigger such as ``<tool_call>``.

Each sequence has its own chain and grammar; the buffers here are shared, which is safe because
only the scheduler's one thread samples.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import llama_cpp
import numpy as np

from worker.generation import EngineError

_token_data_dtype = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
TOP_K = 64  # candidates tried before a grammar is applied to the whole vocabulary


class TokenSampler:
    def __init__(self, ctx: Any, vocab: Any, n_vocab: int):
        self._ctx = ctx
        self._vocab = vocab
        self.n_vocab = n_vocab
        self._candidates = np.zeros(n_vocab, dtype=_token_data_dtype)
        self._candidates["id"] = np.arange(n_vocab, dtype=np.int32)
        self._top = np.zeros(TOP_K, dtype=_token_data_dtype)
        self._one = llama_cpp.llama_token_data_array()
        self._one_data = (llama_cpp.llama_token_data * 1)()

    # ------------------------------------------------------------------ per-sequence samplers

    @staticmethod
    def chain(temperature: float, seed: int) -> Any:
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if temperature <= 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(40))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(0.95, 1))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(temperature))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def grammar(self, gbnf: str, trigger: str | None) -> Any:
        """A grammar sampler; the grammar text must have passed check_grammar."""
        text = gbnf.encode("utf-8")
        if trigger:
            # The pattern must match all the output so far; the grammar is fed from group 1 on.
            pattern = r"[\s\S]*?(" + re.escape(trigger) + r"[\s\S]*)"
            patterns = (ctypes.c_char_p * 1)(pattern.encode("utf-8"))
            no_tokens = (llama_cpp.llama_token * 0)()
            smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                self._vocab, text, b"root", patterns, 1, no_tokens, 0
            )
        else:
            smpl = llama_cpp.llama_sampler_init_grammar(self._vocab, text, b"root")
        if not smpl:
            raise EngineError("llama.cpp rejected the grammar")
        return smpl

    @staticmethod
    def free(smpl: Any) -> None:
        if smpl:
            llama_cpp.llama_sampler_free(smpl)

    # ------------------------------------------------------------------ one token

    def sample(self, chain: Any, grammar: Any, idx: int) -> int:
        """The next token of the sequence whose logits are at batch index ``idx``."""
        token = int(llama_cpp.llama_sampler_sample(chain, self._ctx, idx))
        if grammar is not None:
            if not self._allows(grammar, token):
                token = self._resample(chain, grammar, idx)
            llama_cpp.llama_sampler_accept(grammar, token)
        return token

    @staticmethod
    def take(chain: Any, grammar: Any, token: int) -> None:
        """A token the sequence writes without sampling (forced by its grammar): both samplers
        move past it, as they do past a sampled one."""
        llama_cpp.llama_sampler_accept(grammar, token)
        llama_cpp.llama_sampler_accept(chain, token)

    def allows(self, grammar: Any, token: int) -> bool:
        """Whether the grammar, where it stands, lets ``token`` come next."""
        return self._allows(grammar, token)

    def _allows(self, grammar: Any, token: int) -> bool:
        self._one_data[0].id = token  # type: ignore[assignment]  # ctypes converts; llama_cpp annotates the field c_int32
        self._one_data[0].logit = 0.0
        self._one_data[0].p = 0.0
        self._one.data = self._one_data
        self._one.size = 1
        self._one.selected = -1
        self._one.sorted = False
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(self._one))
        return bool(self._one_data[0].logit != float("-inf"))

    def _resample(self, chain: Any, grammar: Any, idx: int) -> int:
        """The sampled token broke the grammar: sample again among tokens the grammar allows."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, idx), shape=(self.n_vocab,))
        top = np.argpartition(logits, -TOP_K)[-TOP_K:]
        few = self._top
        few["id"] = top
        few["logit"] = logits[top]
        few["p"] = 0.0
        token = self._constrain_and_sample(chain, grammar, few, TOP_K)
        if token is None:
            cand = self._candidates
            cand["logit"] = logits
            cand["p"] = 0.0
            token = self._constrain_and_sample(chain, grammar, cand, self.n_vocab)
        if token is None:
            raise EngineError("no token satisfies the grammar")
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    @staticmethod
    def _constrain_and_sample(chain: Any, grammar: Any, cand: np.ndarray, n: int) -> int | None:
        arr = llama_cpp.llama_token_data_array(cand.ctypes.data_as(llama_cpp.llama_token_data_p), n, -1, False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(arr))
        if not np.isfinite(cand["logit"][:n]).any():
            return None
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        if arr.selected < 0:
            return None
        # samplers may have moved the data pointer; read the selected entry through it
        return int(arr.data[arr.selected].id)
