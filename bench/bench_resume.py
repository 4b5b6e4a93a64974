"""Resuming a long conversation: a saved state restored vs the prompt evaluated again, same run.

A conversation of about --prompt-tokens tokens (a system prompt with facts, a question) runs one
round, as a job does before it pauses for a client tool; then it pauses:

1. Slot evicted: while it waits, other conversations take every slot of the engine. The resumed
   round (the same conversation with the tool's result appended) is served from host memory.
2. Worker restart: the engine is closed and a new one opens the same state folder. The resumed
   round is served from disk.

Each is timed to its first token (the resumed round's prompt time: the first token is sampled
right after it) against the same resumed prompt evaluated from nothing on an engine of the same
settings without tiers, in the same run. Target: at least 20x. Also printed: the copy out of
llama.cpp on the decode thread when the long conversation's state is saved while another
generation decodes (an eviction): it goes in pieces between that generation's steps
(worker/engine/tiers/piecewise.py), and the longest gap's copy is the stall a save costs the
other slots, against the median step of the generation beside it. Target: under one step. The
conversation then resumes beside it, and its state is set back the same way: the longest gap's
restore is printed too.

3. Two workers, 8 interleaved client-tool conversations through /v1/chat/completions: the share
   of follow-up prompt tokens served from cache, with affinity on against off in the same run.
   That is bench/bench_affinity.py (real worker processes, gateways, Redis); --case 3 runs it
   with --context-tokens (default 2,800: about 3,000 tokens a conversation). Target: >= 90%.

Run: .venv/bin/python bench/bench_resume.py [--prompt-tokens 3500] [--n-ctx 4096] [--threads 2]
     .venv/bin/python bench/bench_resume.py --case 3 [--context-tokens 2800]
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.engine import LlamaEngine
from worker.engine.tiers import TierSettings
from worker.generation import GenerationRequest, GenerationResult
from worker.settings import WorkerSettings


def facts(n_tokens: int) -> str:
    # about 14 tokens a fact on SmolLM2's tokenizer
    return " ".join(
        f"Lighthouse {i} stands on rock {i * 7 % 13} and its lamp is {('red', 'green', 'white')[i % 3]}."
        for i in range(max(1, n_tokens // 14))
    )


def first_round(text: str) -> list[tuple[str, bool]]:
    return [
        ("<|im_start|>system\n", True),
        (f"You answer questions about these lighthouses. {text}", False),
        ("<|im_end|>\n<|im_start|>user\n", True),
        ("Which colour is the lamp of lighthouse 41? Ask the weather tool first.", False),
        ("<|im_end|>\n<|im_start|>assistant\n", True),
    ]


def resumed(first: list[tuple[str, bool]], reply: str) -> list[tuple[str, bool]]:
    return [
        *first,
        (reply, False),
        ("<|im_end|>\n<|im_start|>user\n<tool_response>\n", True),
        ('{"weather": "clear, light wind"}', False),
        ("\n</tool_response><|im_end|>\n<|im_start|>assistant\n", True),
    ]


def req(segments: list[tuple[str, bool]], n: int = 16) -> GenerationRequest:
    return GenerationRequest(segments=segments, max_tokens=n, temperature=0.0)


def evict(eng: LlamaEngine) -> None:
    """Other conversations take every slot."""
    for i in range(eng.slots):
        eng.generate_sync(req([("<|im_start|>user\n", True), (f"Count to {i + 3}. " * 40, False)], n=2))


def engine(args: argparse.Namespace, folder: Path | None) -> LlamaEngine:
    tiers = TierSettings(1 << 30, 4 << 30, folder, 256) if folder is not None else None
    return LlamaEngine(
        WorkerSettings().model_path,
        n_ctx=args.n_ctx,
        slots=args.slots,
        n_batch=256,
        prefill_chunk=32,
        n_threads=args.threads,
        flash_attn=args.flash_attn,
        tiers=tiers,
    )


def stall(
    eng: LlamaEngine, first: list[tuple[str, bool]], reply: str
) -> tuple[list[float], list[float], float, float, int]:
    """(each gap's copy ms, each gap's restore ms, median step ms, longest step ms, steps timed)
    of a generation that decodes while another conversation's round ends and its state is saved,
    then the conversation resumes and its state is set back.

    The story is a whole chat turn (a bare user line let SmolLM2 end it within a few tokens, which
    left no steps to time), has room for far more tokens than the measurement needs, and is
    stopped once the save is done and it has decoded a few steps past it."""
    stamps: list[float] = []
    story = req(
        [
            ("<|im_start|>user\n", True),
            ("Write a very long story about the sea, with many chapters.", False),
            ("<|im_end|>\n<|im_start|>assistant\n", True),
        ],
        n=2000,
    )
    story.on_text = lambda _t: stamps.append(time.perf_counter())
    done = threading.Event()
    result: list[GenerationResult] = []

    def run() -> None:
        result.append(eng.generate_sync(story))
        done.set()

    # an idle engine saves what its slots hold and makes the buffer the next eviction copies into
    # (worker/engine/tiers/spare.py): no generation runs then, so it stalls no one; let it finish
    time.sleep(1.0)
    before = len(eng.stats().cache.timings)
    threading.Thread(target=run).start()
    while len(stamps) < 30 and not done.is_set():  # steady decoding before the save
        time.sleep(0.01)
    # a round of the long conversation that evaluates a few new tokens and ends, then another
    # conversation takes its slot (the only free one): the slot's state is saved, an eviction
    eng.generate_sync(req([*resumed(first, reply), ("Also", False)], n=2))
    eng.generate_sync(req([("<|im_start|>user\n", True), ("Name a colour.", False)], n=2))
    # the long conversation again: its state comes back from host memory, in pieces between steps
    eng.generate_sync(req([*resumed(first, reply), ("Also", False)], n=2))
    after = len(stamps)
    while len(stamps) < after + 10 and not done.is_set():  # a few steps past the save
        time.sleep(0.01)
    story.stop_event.set()
    done.wait()
    timings = list(eng.stats().cache.timings)[before:]
    copies = [s * 1000 for kind, stage, s in timings if (kind, stage) == ("save", "copy")]
    sets = [s * 1000 for kind, _, s in timings if kind == "restore"]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    if not gaps:
        return copies, sets, 0.0, 0.0, 0
    return copies, sets, statistics.median(gaps) * 1000, max(gaps) * 1000, len(gaps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-tokens", type=int, default=3500)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--flash-attn",
        action=argparse.BooleanOptionalAction,
        default=WorkerSettings().flash_attn,
        help="default: the worker's",
    )
    ap.add_argument("--case", type=int, choices=(1, 2, 3), action="append", help="cases to run (default 1 and 2)")
    ap.add_argument("--context-tokens", type=int, default=2800, help="case 3: notes per conversation")
    args = ap.parse_args()
    cases = set(args.case or (1, 2))
    if 3 in cases:
        affinity = Path(__file__).with_name("bench_affinity.py")
        cmd = [sys.executable, "-u", str(affinity), "--context-tokens", str(args.context_tokens)]
        print("case 3:", " ".join(cmd[1:]), flush=True)
        rc = subprocess.call(cmd)
        if rc or cases == {3}:
            sys.exit(rc)
    first = first_round(facts(args.prompt_tokens))
    folder = Path(tempfile.mkdtemp(prefix="toolq-bench-kv-"))
    eng = engine(args, folder)
    try:
        r1 = eng.generate_sync(req(first))
        reply = r1.text
        print(
            f"conversation: {r1.prompt_tokens} prompt tokens, n_ctx {args.n_ctx}, {args.slots} slots, "
            f"flash_attn {args.flash_attn}, {args.threads} threads"
        )
        print(f"round 1 evaluated fresh: {r1.prompt_ms:.0f} ms ({r1.prompt_tokens / r1.prompt_ms * 1000:.0f} tok/s)")
        per_token = r1.prompt_ms / r1.prompt_tokens
        evict(eng)
        r = eng.generate_sync(req(resumed(first, reply)))
        restore = [s for kind, _, s in eng.stats().cache.timings if kind == "restore"]
        print(
            f"case 1 slot evicted: {r.prompt_tokens} prompt tokens, cached {r.cached_by_source}, first token after "
            f"{r.prompt_ms:.0f} ms (restore {restore[-1] * 1000 if restore else 0:.1f} ms); "
            f"~{per_token * r.prompt_tokens / r.prompt_ms:.0f}x faster than round 1's rate over the same tokens"
        )
        results = {1: r}
        copies, sets, step_ms, longest_ms, steps = stall(eng, first, reply)
        copy_ms = max(copies, default=0.0)
        set_ms = max(sets, default=0.0)
        if steps:
            print(
                f"save stall: copied out of llama.cpp in {len(copies)} gaps between steps, {sum(copies):.1f} ms "
                f"in all; the longest gap's copy {copy_ms:.1f} ms on the decode thread ({copy_ms / step_ms:.2f} "
                f"of a median step, target < 1); the generation beside it over {steps} steps: median step "
                f"{step_ms:.1f} ms, longest step {longest_ms:.1f} ms ({longest_ms / step_ms:.2f} steps; the other "
                "rounds' prompt chunks share steps too)"
            )
            print(
                f"restore stall: set back in {len(sets)} gaps, {sum(sets):.1f} ms in all; the longest gap's "
                f"{set_ms:.1f} ms ({set_ms / step_ms:.2f} of a median step)"
            )
        else:
            print(f"save stall: copy out {copy_ms:.1f} ms; the story beside it decoded no steps to compare")
    finally:
        eng.close()  # the worker stops: every state still in a slot is saved, every queued save written
    if 2 in cases:
        eng = engine(args, folder)
        try:
            r = eng.generate_sync(req(resumed(first, reply)))
            print(
                f"case 2 worker restart: cached {r.cached_by_source}, first token after {r.prompt_ms:.0f} ms; "
                f"~{per_token * r.prompt_tokens / r.prompt_ms:.0f}x faster than round 1's rate over the same tokens"
            )
            results[2] = r
        finally:
            eng.close()
    shutil.rmtree(folder, ignore_errors=True)
    # the anchor: the same resumed prompt evaluated from nothing (one character changed at its
    # start, so no slot or saved state holds any of it), on an engine of the same settings
    eng = engine(args, None)
    try:
        other = [
            (first[0][0], True),
            ("You  answer" + first[1][0][len("You answer") :], False),
            *resumed(first, reply)[2:],
        ]
        anchor = eng.generate_sync(req(other))
        print(
            f"anchor: the resumed prompt evaluated again: {anchor.prompt_tokens} tokens, "
            f"cached {anchor.cached_tokens}, "
            f"first token after {anchor.prompt_ms:.0f} ms ({anchor.prompt_tokens / anchor.prompt_ms * 1000:.0f} tok/s)"
        )
        for case, r in results.items():
            print(f"case {case}: {anchor.prompt_ms / r.prompt_ms:.1f}x faster than evaluating again (target >= 20x)")
    finally:
        eng.close()


if __name__ == "__main__":
    main()
