"""Tenants inside one engine's batch, on the real bundled model (worker/engine/fairness.py).

- B beside A's flood: tenant B runs short jobs one after another, first on a quiet engine, then
  while tenant A keeps ``--a-flight`` long jobs in flight (prompts of about 1,500 tokens, answers
  of up to 200); B's p95 job time quiet and beside the flood, and their ratio (target 1.5x).
- Throughput: the batch's generated tokens per second with the counters and without them, for one
  tenant alone (four jobs) and for two tenants of equal weight (two jobs each); target 0.95x.
  The runs alternate, counters on and off, so a change of the machine's load falls on both.

Used by bench/bench_fairness.py (``--batch-only`` runs just this part) and the real-model test
tests/e2e/test_engine_fairness.py.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import Future

from worker.engine.tiers import TierSettings
from worker.generation import GenerationRequest, GenerationResult
from worker.settings import WorkerSettings

WORDS = ("harbour", "lantern", "granite", "gull", "tide", "keeper", "beacon", "reef", "mist", "anchor")


def engine(*, fair: bool, slots: int = 4, threads: int = 1):
    """One decode thread by default: on a machine shared with other work, llama.cpp's threads
    wait for each other at every barrier, and a descheduled one stalls a step for a time slice,
    which buries the figures in noise."""
    from worker.engine import LlamaEngine

    return LlamaEngine(
        WorkerSettings().model_path,
        n_ctx=2048,
        slots=slots,
        n_batch=256,
        prefill_chunk=32,
        tiers=TierSettings(1 << 30, 0, None, 64),
        fair=fair,
        n_threads=threads,
    )


def _segments(system: str, user: str) -> list[tuple[str, bool]]:
    return [
        ("<|im_start|>system\n", True),
        (system, False),
        ("<|im_end|>\n<|im_start|>user\n", True),
        (user, False),
        ("<|im_end|>\n<|im_start|>assistant\n", True),
    ]


def a_job(i: int, *, prompt_words: int = 500, answer: int = 200) -> GenerationRequest:
    """Tenant A's long job: a prompt of about 1,500 tokens of its own, a long answer."""
    notes = " ".join(f"{WORDS[(i * 7 + k) % len(WORDS)]}{(i * 31 + k) % 97}" for k in range(prompt_words))
    return GenerationRequest(
        segments=_segments(f"Notes of voyage {i}: {notes}", "Write a very long story from these notes."),
        max_tokens=answer,
        tenant="a",
    )


def b_job(i: int, *, answer: int = 24) -> GenerationRequest:
    """Tenant B's short job: a short question, a short answer."""
    return GenerationRequest(
        segments=_segments("You answer briefly.", f"What is {i} plus {i + 3}? Say it in a sentence."),
        max_tokens=answer,
        tenant="b",
    )


def b_times(eng, n: int, start: int = 0) -> list[float]:
    """B's job times, one job after another."""
    out = []
    for i in range(start, start + n):
        t0 = time.perf_counter()
        eng.generate_sync(b_job(i))
        out.append(time.perf_counter() - t0)
    return out


class Flood:
    """Tenant A keeps ``flight`` long jobs in flight until stopped."""

    def __init__(self, eng, flight: int, **job):
        self.eng, self.flight, self.job = eng, flight, job
        self.done: list[GenerationResult] = []
        self.tokens = 0  # A's generated tokens, its jobs stopped at the end included
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._i = 0
        self._live: list[tuple[GenerationRequest, Future[GenerationResult]]] = []

    def start(self) -> Flood:
        for _ in range(self.flight):
            self._submit()
        return self

    def _submit(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self._i += 1
            req = a_job(self._i, **self.job)
            fut = self.eng.submit(req)
            self._live.append((req, fut))
        fut.add_done_callback(self._ended)

    def _ended(self, fut: Future[GenerationResult]) -> None:
        if fut.exception() is None:
            self.tokens += fut.result().completion_tokens
            if fut.result().stop_reason != "aborted":
                self.done.append(fut.result())
        self._submit()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            live = list(self._live)
        for req, _ in live:
            req.stop_event.set()
        for _, fut in live:
            fut.exception()


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def beside_flood(eng, *, b_jobs: int = 12, a_flight: int = 8, warmup_s: float = 3.0, **a_job_args) -> dict[str, float]:
    """B's p95 quiet (half before the flood, half after) and beside A's flood."""
    quiet = b_times(eng, b_jobs // 2, 0)
    flood = Flood(eng, a_flight, **a_job_args).start()
    time.sleep(warmup_s)  # A holds every slot and has long jobs waiting
    try:
        beside = b_times(eng, b_jobs, 1000)
    finally:
        flood.stop()
    quiet += b_times(eng, b_jobs - b_jobs // 2, 2000)
    return {
        "quiet_p95": p95(quiet),
        "beside_p95": p95(beside),
        "quiet_p50": statistics.median(quiet),
        "beside_p50": statistics.median(beside),
        "ratio": p95(beside) / p95(quiet),
        "a_done": len(flood.done),
        "a_tokens": flood.tokens,
        "set_aside": eng.stats().set_aside,
    }


def throughput(eng, tenants: dict[str, int], *, answer: int = 96) -> float:
    """Generated tokens per second of the batch, ``tenants``: tenant -> jobs, all at once."""
    reqs = []
    for t, n in tenants.items():
        for i in range(n):
            reqs.append(
                GenerationRequest(
                    segments=_segments("You tell stories.", f"Write a long story about {WORDS[i]} {t} {i}."),
                    max_tokens=answer,
                    tenant=t,
                )
            )
    t0 = time.perf_counter()
    results = [f.result() for f in [eng.submit(r) for r in reqs]]
    return sum(r.completion_tokens for r in results) / (time.perf_counter() - t0)
