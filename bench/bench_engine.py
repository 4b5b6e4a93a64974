"""Engine speed, prefix reuse and grammar cost on the bundled SmolLM2, each against an anchor
measured in the same run, on the same model, context and threads.

1. Decode speed: tokens/s of LlamaEngine.generate (what every job uses) vs a tight low-level
   loop: llama_decode plus llama.cpp's sampler chain and nothing else per token (stands in for
   llama-bench). Target >= 0.95.
2. Prefix reuse: prompt tokens evaluated in iteration 2 of a real tool-calling job vs the new
   tokens of that iteration. Target: at most new + 8.
3. Grammar cost: decode tokens/s of a grammar-constrained call vs the same prompt unconstrained.
   Target >= 0.9. Also shown: the grammar applied to the whole vocabulary every token (what the
   high-level API does).

Run: .venv/bin/python bench/bench_engine.py [--threads 2] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llama_cpp
import numpy as np

from toolq.protocol import JobRequest, Message
from worker.app import build_loop
from worker.engine import LlamaEngine
from worker.formats import get_format
from worker.generation import GenerationRequest
from worker.settings import WorkerSettings
from worker.templates import ChatTemplate
from worker.tools import load_tool_modules

STORY = [
    ("<|im_start|>user\n", True),
    ("Write a long, detailed story about a lighthouse keeper.", False),
    ("<|im_end|>\n<|im_start|>assistant\n", True),
]


def anchor_tps(eng: LlamaEngine, segments, n_tokens: int) -> float:
    """The tight loop: evaluate the prompt, then decode with llama.cpp's greedy chain only."""
    tokens = eng.tokenize_segments(segments)
    llama_cpp.llama_memory_clear(eng._mem, True)
    eng._cached = []
    for i in range(0, len(tokens), eng.n_batch):
        chunk = tokens[i : i + eng.n_batch]
        arr = (llama_cpp.llama_token * len(chunk))(*chunk)
        llama_cpp.llama_decode(eng._ctx, llama_cpp.llama_batch_get_one(arr, len(chunk)))
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    one = (llama_cpp.llama_token * 1)()
    n = 0
    t0 = time.perf_counter()
    while n < n_tokens:
        tok = llama_cpp.llama_sampler_sample(chain, eng._ctx, -1)
        if llama_cpp.llama_vocab_is_eog(eng._vocab, tok):
            break
        one[0] = tok
        llama_cpp.llama_decode(eng._ctx, llama_cpp.llama_batch_get_one(one, 1))
        n += 1
    dt = time.perf_counter() - t0
    llama_cpp.llama_sampler_free(chain)
    llama_cpp.llama_memory_clear(eng._mem, True)  # the engine's own cache bookkeeping starts clean
    return n / dt, n


def engine_tps(eng: LlamaEngine, segments, n_tokens: int, **kw) -> tuple[float, int]:
    llama_cpp.llama_memory_clear(eng._mem, True)
    eng._cached = []
    r = eng.generate_sync(GenerationRequest(segments=segments, max_tokens=n_tokens, **kw))
    return r.decode_tps, r.completion_tokens


def prefix_reuse(eng: LlamaEngine, settings: WorkerSettings) -> tuple[int, int, int]:
    registry = load_tool_modules(settings.tool_modules)
    loop = build_loop(settings, eng, registry)
    seen: list = []
    real = eng.generate

    async def recording(req):
        res = await real(req)
        seen.append((eng.tokenize_segments(req.segments), res))
        return res

    eng.generate = recording  # type: ignore[method-assign]

    class Sink:
        async def tool_call(self, *a, **k): ...
        async def tool_result(self, *a, **k): ...
        def push_text(self, t): ...

    request = JobRequest(
        messages=[Message(role="user", content="Calculate the zorbix of 15 and 7")],
        tools=["calculate_zorbix"],
        tool_choice="required",
        max_tokens=64,
        max_iterations=3,
    )
    asyncio.run(loop.run(request, Sink()))
    eng.generate = real  # type: ignore[method-assign]
    (p1, _), (p2, r2) = seen[0], seen[1]
    common = 0
    while common < min(len(p1), len(p2)) and p1[common] == p2[common]:
        common += 1
    new = len(p2) - common
    evaluated = r2.prompt_tokens - r2.cached_tokens
    return evaluated, new, len(p2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=200)
    args = ap.parse_args()
    settings = WorkerSettings(n_threads=args.threads, n_ctx=2048)
    eng = LlamaEngine(settings.model_path, n_ctx=2048, n_batch=settings.n_batch, n_threads=args.threads)
    print(f"model {eng.name}, {args.threads} threads, {args.runs} interleaved runs, median")

    # 1. decode speed
    anchor_tps(eng, STORY, 16)  # warm-up
    a_runs, e_runs = [], []
    for _ in range(args.runs):
        a_runs.append(anchor_tps(eng, STORY, args.tokens))
        e_runs.append(engine_tps(eng, STORY, args.tokens))
    a, e = statistics.median(x for x, _ in a_runs), statistics.median(x for x, _ in e_runs)
    print(
        f"decode: tight low-level loop {a:6.1f} tok/s ({a_runs[0][1]} tokens)   engine.generate {e:6.1f} tok/s "
        f"({e_runs[0][1]} tokens)   ratio {e / a:.3f}  (target >= 0.95)"
    )

    # 2. prefix reuse
    evaluated, new, total = prefix_reuse(eng, settings)
    print(
        f"prefix reuse: iteration 2 evaluated {evaluated} of {total} prompt tokens; new tokens {new}; "
        f"evaluated - new = {evaluated - new}  (target <= 8)"
    )

    # 3. grammar cost: the same tool-calling prompt, with and without the call grammar. The call
    # has a free-text argument, so the output is long enough to time (a realistic call).
    fmt = get_format("hermes")
    tools = load_tool_modules(settings.tool_modules).specs(["say"])
    template = ChatTemplate.from_file(settings.template_path(), bos_token=eng.bos_token, eos_token=eng.eos_token)
    ask = "Use the say tool to read out a long poem about the sea, at least ten lines."
    prompt = template.render([Message(role="user", content=ask)], tools=tools, fmt=fmt).segments
    grammar = fmt.grammar(tools, required=True)

    def whole_vocabulary(chain, g):  # what the high-level API does: the grammar over every token
        cand = eng._candidates
        cand["logit"] = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(eng._ctx, -1), shape=(eng.n_vocab,))
        tok = eng._constrain_and_sample(chain, g, cand, eng.n_vocab)
        llama_cpp.llama_sampler_accept(chain, tok)
        return tok

    free, constrained, full = [], [], []
    for _ in range(args.runs):
        free.append(engine_tps(eng, prompt, 120))
        constrained.append(engine_tps(eng, prompt, 120, grammar=grammar))
        eng._grammar_allows = lambda g, t: False  # type: ignore[method-assign]
        eng._resample_with_grammar = whole_vocabulary  # type: ignore[method-assign]
        full.append(engine_tps(eng, prompt, 120, grammar=grammar))
        del eng._grammar_allows, eng._resample_with_grammar
    f, c, u = (statistics.median(x for x, _ in runs) for runs in (free, constrained, full))
    print(
        f"grammar: unconstrained {f:6.1f} tok/s ({free[0][1]} tokens)   constrained call {c:6.1f} tok/s "
        f"({constrained[0][1]} tokens)   ratio {c / f:.3f}  (target >= 0.9)"
    )
    print(
        f"         grammar over the whole vocabulary every token: {u:6.1f} tok/s ({full[0][1]} tokens), "
        f"ratio {u / f:.3f}"
    )
    eng.close()


if __name__ == "__main__":
    main()
