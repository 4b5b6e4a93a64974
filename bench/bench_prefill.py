"""Prompt evaluation through the engine: flash attention on vs off, and what slows a long prompt.

For each flash-attention setting (off is the anchor, measured in the same run), prompt tokens per
second of a fresh prompt evaluated through LlamaEngine:

- ~512 and ~2,800 tokens, nothing else in the context (issue 18, item 5);
- ~2,800 tokens while another slot holds a ~2,800-token conversation, idle: the KV cache is
  unified (one cache for every slot, worker/engine/llama.py), so attention spans the other
  slot's cells too, masked out;
- ~2,800 tokens while another slot generates: each step then carries at most
  TOOLQ_PREFILL_CHUNK prompt tokens (--chunk, default 32, as on a CPU), against the same with
  the chunk at n_batch.

Run: .venv/bin/python bench/bench_prefill.py [--threads 2] [--runs 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.engine import LlamaEngine
from worker.generation import GenerationRequest
from worker.settings import WorkerSettings


def prompt(n_tokens: int, salt: int) -> GenerationRequest:
    text = " ".join(
        f"Note {salt}-{i}: buoy {i * 7 % 13} is {('red', 'green', 'white')[i % 3]}." for i in range(n_tokens // 14)
    )
    return GenerationRequest(
        segments=[("<|im_start|>user\n", True), (text, False), ("<|im_end|>\n<|im_start|>assistant\n", True)],
        max_tokens=1,
        temperature=0.0,
    )


def rate(eng: LlamaEngine, req: GenerationRequest) -> float:
    r = eng.generate_sync(req)
    assert r.cached_tokens < 8, r.cached_tokens
    return (r.prompt_tokens - r.cached_tokens) / r.prompt_ms * 1000


def beside_generation(eng: LlamaEngine, req: GenerationRequest) -> float:
    story = GenerationRequest(
        segments=[("<|im_start|>user\n", True), ("Write a very long story about the sea.", False)],
        max_tokens=100_000,
        temperature=0.0,
    )
    t = threading.Thread(target=eng.generate_sync, args=(story,))
    t.start()
    try:
        return rate(eng, req)
    finally:
        story.stop_event.set()
        t.join()


def measure(args: argparse.Namespace, flash: bool, chunk: int, *, only_beside: bool = False) -> dict[str, float]:
    eng = LlamaEngine(
        WorkerSettings().model_path,
        n_ctx=4096,
        slots=2,
        n_batch=256,
        prefill_chunk=chunk,
        n_threads=args.threads,
        flash_attn=flash,
    )
    out: dict[str, list[float]] = {}
    try:
        for run in range(args.runs):
            salt = 100 * run + (50 if flash else 0) + chunk
            if not only_beside:
                out.setdefault("512 fresh", []).append(rate(eng, prompt(512, salt)))
                out.setdefault("2800 fresh", []).append(rate(eng, prompt(2800, salt + 1)))
                # the slot of "2800 fresh" stays full: the next prompt takes the other slot
                out.setdefault("2800 beside a full slot", []).append(rate(eng, prompt(2800, salt + 2)))
            out.setdefault(f"2800 while another generates (chunk {chunk})", []).append(
                beside_generation(eng, prompt(2800, salt + 3))
            )
    finally:
        eng.close()
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=32)
    args = ap.parse_args()
    off = measure(args, False, args.chunk)
    on = measure(args, True, args.chunk)
    print(f"{'prompt':48} {'off tok/s':>10} {'on tok/s':>10} {'on/off':>7}")
    for k in off:
        print(f"{k:48} {off[k]:10.0f} {on[k]:10.0f} {on[k] / off[k]:7.2f}")
    for flash, anchor in ((False, off), (True, on)):
        big = measure(args, flash, 256, only_beside=True)
        k = "2800 while another generates (chunk 256)"
        base = anchor["2800 fresh"]
        print(
            f"flash_attn {flash}: {k}: {big[k]:.0f} tok/s; chunk {args.chunk}: "
            f"{anchor[f'2800 while another generates (chunk {args.chunk})']:.0f}; fresh alone {base:.0f}"
        )


if __name__ == "__main__":
    main()
