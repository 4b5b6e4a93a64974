"""Aggregate decode speed of the batching engine at 1, 2, 4, 8 concurrent sequences, each against an anchor
measured in the same run, on the same model, threads, context and prompts.

- Anchor: the tight multi-sequence ``llama_decode`` loop of bench/decode_rate.py (one batch a step with one
  token per sequence, greedy sampling per sequence, nothing else), on its own context shaped like the engine's.
  Target: engine >= 0.9 of the anchor at every size.
- ``--batched-bench PATH``: llama.cpp's own ``llama-batched-bench`` (random tokens, no sampling) at the same
  prompt depth, tokens and sizes; its S_TG is printed next to ours.
- ``--llama-bench PATH``: single-sequence decode against ``llama-bench`` tg at the same depth, one llama-bench
  run in each of ours (the machine's speed drifts by 10-20% over minutes). Target >= 0.95.

Speeds are steady-state, for the engine and the anchor alike (bench/decode_rate.py). Every prompt makes
SmolLM2 write well past ``--tokens`` under greedy decoding; the token count of every sequence is reported.

Both tools build from the llama.cpp sources that the llama-cpp-python sdist vendors (vendor/llama.cpp):
  cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF
  cmake --build build -j2 --target llama-bench llama-batched-bench

Run: .venv/bin/python bench/bench_batch.py [--seqs 1,2,4,8] [--tokens 128] [--threads 2] [--runs 3]
         [--batched-bench PATH] [--llama-bench PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decode_rate import Measure, OtherLoad, TightLoopProcess, engine_rate

from worker.engine import LlamaEngine
from worker.settings import WorkerSettings

# Each makes SmolLM2 write 300+ tokens under greedy decoding, alone and batched; sequence i takes ASKS[i % 12].
ASKS = [
    "Write a long, detailed story about a lighthouse keeper.",
    "Write a long essay about the history of Rome.",
    "Write a long essay about the history of China.",
    "Write a long, detailed story about a dragon and a knight.",
    "Write a long essay about the industrial revolution.",
    "Write a long, detailed story about a journey to Mars.",
    "Write a long essay about the history of mathematics.",
    "Write a long, detailed story about a haunted house.",
    "Write a long essay about the oceans of the world.",
    "Write a long, detailed story about a lost city in the jungle.",
    "Write a long essay about the invention of the printing press.",
    "Write a long, detailed story about a clockmaker.",
]


def segments(ask: str) -> list[tuple[str, bool]]:
    return [("<|im_start|>user\n", True), (ask, False), ("<|im_end|>\n<|im_start|>assistant\n", True)]


def batched_bench(path: str, model: Path, *, depth: int, args: argparse.Namespace) -> dict[int, float]:
    top = max(args.seqs)
    cmd = (
        f"{path} -m {model} -c {top * (depth + args.tokens + 16)} -b {args.n_batch} -ub {args.n_batch} "
        f"-t {args.threads} -tb {args.threads} -fa off -kvu -ngl {args.gpu_layers} -npp {depth} "
        f"-ntg {args.tokens} -npl {','.join(map(str, args.seqs))} --output-format jsonl"
    ).split()  # a path with spaces is not supported
    print("$ " + " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in (out.stdout + out.stderr).splitlines() if line.startswith("{")]
    return {r["pl"]: r["speed_tg"] for r in rows}


def llama_bench(path: str, model: Path, *, depth: int, args: argparse.Namespace, quiet: bool = False) -> float:
    cmd = (
        f"{path} -m {model} -p 0 -n {args.tokens} -d {depth} -t {args.threads} -fa off -ngl {args.gpu_layers} "
        "-r 1 -o json"
    ).split()
    if not quiet:
        print("$ " + " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)[0]["avg_ts"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8])
    ap.add_argument("--tokens", type=int, default=128, help="tokens each sequence generates")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per size; the median is shown")
    ap.add_argument("--n-batch", type=int, default=256)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--batched-bench", metavar="PATH", help="a llama-batched-bench binary")
    ap.add_argument("--llama-bench", metavar="PATH", help="a llama-bench binary")
    args = ap.parse_args()
    model = WorkerSettings().model_path
    chats = [segments(ASKS[i % len(ASKS)]) for i in range(max(args.seqs))]

    probe = LlamaEngine(model, n_ctx=64, n_threads=args.threads)  # only to tokenize as the engine does
    prompts = [probe.tokenize_segments(c) for c in chats]
    probe.close()
    depths = [len(p) for p in prompts]
    n_ctx = -(-(max(depths) + args.tokens + 16) // 64) * 64  # per slot: the longest prompt and its reply
    shape = {"n_ctx": n_ctx, "n_batch": args.n_batch, "n_threads": args.threads}
    loops = TightLoopProcess(model, gpu_layers=args.gpu_layers, **shape)
    other = OtherLoad(loops.pid)

    def engine(n: int) -> LlamaEngine:  # one alive at a time (bench/decode_rate.py says why)
        return LlamaEngine(model, slots=n, n_gpu_layers=args.gpu_layers, **shape)

    print(
        f"model {model.stem}, {args.threads} threads, {args.tokens} tokens a sequence, "
        f"prompts of {min(depths)}-{max(depths)} tokens, n_batch {args.n_batch}, per-slot context {n_ctx}, "
        f"{args.runs} interleaved runs, median"
    )
    a_runs: dict[int, list[Measure]] = {n: [] for n in args.seqs}
    e_runs: dict[int, list[Measure]] = {n: [] for n in args.seqs}
    tg_runs: list[float] = []
    for run in range(args.runs + 1):  # run 0 warms up
        for n in args.seqs:
            a = loops.run(prompts[:n], args.tokens if run else 16)
            eng = engine(n)
            engine_rate(eng, chats[:n], 16)  # a fresh engine: warm it up
            e = engine_rate(eng, chats[:n], args.tokens if run else 16)
            eng.close()
            if run:
                a_runs[n].append(a)
                e_runs[n].append(e)
        if args.llama_bench and 1 in args.seqs and run:  # interleaved too: this machine's speed drifts
            tg_runs.append(llama_bench(args.llama_bench, model, depth=depths[0], args=args, quiet=run > 1))
    load = other.note()
    loops.close()

    bb = {}
    if args.batched_bench:
        bb = batched_bench(args.batched_bench, model, depth=round(statistics.mean(depths)), args=args)
    print()
    print(
        f"{'seqs':>4}  {'engine tok/s':>12}  {'anchor tok/s':>12}  {'ratio':>6}  {'batched-bench S_TG':>18}  "
        f"{'steps timed':>11}  tokens per sequence (engine; anchor)"
    )
    short = False
    for n in args.seqs:
        e = statistics.median(m.tps for m in e_runs[n])
        a = statistics.median(m.tps for m in a_runs[n])
        counts = [sorted({c for m in runs[n] for c in m.counts}) for runs in (e_runs, a_runs)]
        short |= any(c != args.tokens for cs in counts for c in cs)
        s_tg = f"{bb[n]:18.1f}" if n in bb else f"{'-':>18}"
        print(
            f"{n:>4}  {e:12.1f}  {a:12.1f}  {e / a:6.3f}  {s_tg}  {e_runs[n][0].steps:>11}  "
            f"{'/'.join(map(str, counts[0]))}; {'/'.join(map(str, counts[1]))}"
        )
    print("target: engine >= 0.9 x anchor at every size")
    if short:
        print(f"WARNING: some sequence generated other than {args.tokens} tokens (see the counts)")

    if args.llama_bench and 1 in args.seqs:
        tg = statistics.median(tg_runs)
        e = statistics.median(m.tps for m in e_runs[1])
        print(
            f"single sequence at depth {depths[0]}: engine {e:6.1f} tok/s   llama-bench tg{args.tokens} "
            f"@ d{depths[0]} {tg:6.1f} tok/s   ratio {e / tg:.3f}  (target >= 0.95)"
        )
    print(load)


if __name__ == "__main__":
    main()
