"""Engine speed, prefix reuse and grammar cost on the bundled SmolLM2, each against an anchor measured in the
same run, on the same model, context and threads.

1. Decode speed: tokens/s of one LlamaEngine generation (what every job uses) vs the tight low-level loop of
   bench/decode_rate.py (llama_decode plus llama.cpp's greedy sampler and nothing else per token, on its own
   context shaped like the engine's). Target >= 0.95.
2. Prefix reuse: prompt tokens evaluated in iteration 2 of a real tool-calling job vs the new tokens of that
   iteration. Target: at most new + 8.
3. Grammar cost: decode tokens/s of a grammar-constrained call vs the same tool prompt unconstrained, both
   through the engine. Target >= 0.9. Also shown: the tight loop on that prompt (the unconstrained figure's
   own anchor: the prompt is ~300 tokens deep, so it decodes slower than section 1's short one), and the
   tight loop with the grammar applied to the whole vocabulary every token (what the high-level API does).
   Every token is sampled here (jump_forward off), so this is the cost of sampling under a grammar.
4. Forced text: the whole zorbix call under its required-call grammar, with the text the grammar forces
   evaluated in chunks (worker/grammar/forced.py) vs every token sampled (the anchor), same engine,
   interleaved: milliseconds, decode steps, tokens, and whether both wrote the same text.

Speeds are steady-state and measured the same way on both sides (bench/decode_rate.py). The tight loop runs in
a process of its own: with two threads of one process calling llama_decode, libgomp's barriers stop spinning
and both decode at about 40% of their speed on 2 cores (why this benchmark once printed ~30 tok/s for the
unconstrained tool prompt: it decoded on the main thread after section 2 had decoded on the engine's thread).

Run: .venv/bin/python bench/bench_engine.py [--threads 2] [--runs 5] [--tokens 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decode_rate import Measure, OtherLoad, TightLoopProcess, engine_rate

from toolq.tools import load_tool_modules
from toolq.wire.protocol import JobRequest, Message
from worker.app import build_loop
from worker.engine import LlamaEngine
from worker.formats import get_format
from worker.generation import GenerationRequest
from worker.settings import WorkerSettings
from worker.templates import ChatTemplate

STORY = [
    ("<|im_start|>user\n", True),
    ("Write a long, detailed story about a lighthouse keeper.", False),
    ("<|im_end|>\n<|im_start|>assistant\n", True),
]


def median(runs: list[Measure]) -> float:
    return statistics.median(m.tps for m in runs)


def counts(runs: list[Measure]) -> str:
    return "/".join(str(c) for c in sorted({c for m in runs for c in m.counts}))


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
        def push_text(self, t, reader=None): ...

    request = JobRequest(
        messages=[Message(role="user", content="Calculate the zorbix of 15 and 7")],
        tools=["calculate_zorbix"],
        tool_choice="required",
        max_tokens=64,
        max_iterations=3,
    )
    asyncio.run(loop.run(request, Sink()))
    del eng.generate  # the bound method again
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
    shape = {"n_ctx": 2048, "n_batch": settings.n_batch, "n_threads": args.threads}
    eng = LlamaEngine(settings.model_path, slots=1, **shape)
    tight = TightLoopProcess(settings.model_path, **shape)  # its own process: bench/decode_rate.py says why
    other = OtherLoad(tight.pid)
    print(f"model {eng.name}, {args.threads} threads, {args.runs} interleaved runs, median")

    # 1. decode speed
    story = eng.tokenize_segments(STORY)
    tight.run([story], 16)  # warm-up
    engine_rate(eng, [STORY], 16)
    a_runs, e_runs = [], []
    for _ in range(args.runs):
        a_runs.append(tight.run([story], args.tokens))
        e_runs.append(engine_rate(eng, [STORY], args.tokens))
    a, e = median(a_runs), median(e_runs)
    print(
        f"decode: tight low-level loop {a:6.1f} tok/s ({counts(a_runs)} tokens)   engine {e:6.1f} tok/s "
        f"({counts(e_runs)} tokens)   ratio {e / a:.3f}  (target >= 0.95)"
    )

    # 2. prefix reuse
    evaluated, new, total = prefix_reuse(eng, settings)
    print(
        f"prefix reuse: iteration 2 evaluated {evaluated} of {total} prompt tokens; new tokens {new}; "
        f"evaluated - new = {evaluated - new}  (target <= 8)"
    )

    # 3. grammar cost: the same tool-calling prompt, with and without the call grammar. The call has a
    # free-text argument, so the output is long enough to time (a realistic call).
    fmt = get_format("hermes")
    tools = load_tool_modules(settings.tool_modules).specs(["say"])
    template = ChatTemplate.from_file(settings.template_path(), bos_token=eng.bos_token, eos_token=eng.eos_token)
    ask = "Use the say tool to read out a long poem about the sea, at least ten lines."
    prompt = template.render([Message(role="user", content=ask)], tools=tools, fmt=fmt).segments
    tokens = eng.tokenize_segments(prompt)
    grammar = fmt.grammar(tools, required=True)
    eng.jump_forward = False  # the cost of sampling under the grammar, every token sampled (section 4: forced text)
    free, constrained, loop_free, loop_full = [], [], [], []
    for _ in range(args.runs):
        free.append(engine_rate(eng, [prompt], 120))
        constrained.append(engine_rate(eng, [prompt], 120, grammar=grammar))
        loop_free.append(tight.run([tokens], 120))
        loop_full.append(tight.run([tokens], 120, grammar=grammar))
    f, c, lf, lu = median(free), median(constrained), median(loop_free), median(loop_full)
    print(
        f"grammar (prompt of {len(tokens)} tokens): unconstrained {f:6.1f} tok/s ({counts(free)} tokens)   "
        f"constrained call {c:6.1f} tok/s ({counts(constrained)} tokens)   ratio {c / f:.3f}  (target >= 0.9)"
    )
    print(
        f"         tight loop on this prompt: unconstrained {lf:6.1f} tok/s ({counts(loop_free)} tokens), "
        f"engine/loop {f / lf:.3f}; grammar over the whole vocabulary every token {lu:6.1f} tok/s "
        f"({counts(loop_full)} tokens), ratio to unconstrained {lu / lf:.3f}"
    )

    # 4. forced text: the whole zorbix call (one required call) with the text the grammar forces
    # evaluated as chunks, against every token sampled, same engine, interleaved
    zorbix = load_tool_modules(settings.tool_modules).specs(["calculate_zorbix"])
    ask = [Message(role="user", content="Calculate the zorbix of 15 and 7")]
    call_prompt = template.render(ask, tools=zorbix, fmt=fmt).segments
    call_grammar = fmt.call_grammar(zorbix)  # one call, as with parallel_tool_calls false
    timed: dict[bool, list[tuple[float, int, int, str]]] = {True: [], False: []}
    for _ in range(args.runs + 1):  # the first round warms up
        for jump in (False, True):
            eng.jump_forward = jump
            steps = eng.stats().steps
            t0 = time.perf_counter()
            r = eng.generate_sync(GenerationRequest(segments=call_prompt, max_tokens=64, grammar=call_grammar))
            ms = (time.perf_counter() - t0) * 1000
            timed[jump].append((ms, eng.stats().steps - steps, r.completion_tokens, r.text))
    sampled, jumped = timed[False][1:], timed[True][1:]
    ms_s, ms_j = statistics.median(t[0] for t in sampled), statistics.median(t[0] for t in jumped)
    same = all(a[3] == b[3] for a, b in zip(sampled, jumped, strict=True))
    print(
        f"forced text (one zorbix call, required): every token sampled {ms_s:6.1f} ms, "
        f"{sampled[0][1]} steps, {sampled[0][2]} tokens;  forced text in chunks {ms_j:6.1f} ms, "
        f"{jumped[0][1]} steps, {jumped[0][2]} tokens;  time ratio {ms_j / ms_s:.3f}; same text: {same}"
    )
    print(other.note())
    eng.close()
    tight.close()


if __name__ == "__main__":
    main()
