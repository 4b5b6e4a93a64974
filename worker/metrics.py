"""The worker's own Prometheus metrics (no job or tenant ids as labels)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from toolq.wire.protocol import JobResult
from worker.generation import EngineStats

JOBS = Counter("toolq_worker_jobs_total", "Jobs ended by this worker, by outcome", ["outcome"])
PROMPT_TOKENS = Counter("toolq_worker_prompt_tokens_total", "Prompt tokens (cached ones included)")
CACHED_TOKENS = Counter("toolq_worker_cached_prompt_tokens_total", "Prompt tokens reused from the cache")
COMPLETION_TOKENS = Counter("toolq_worker_completion_tokens_total", "Tokens generated")
ITERATIONS = Histogram("toolq_worker_iterations", "Generation rounds per job", buckets=(1, 2, 3, 4, 5, 7, 10, 20))
GENERATE_SECONDS = Histogram("toolq_worker_generate_seconds", "Time in the model per job")
TOOL_CALLS = Counter("toolq_worker_tool_calls_total", "Tool calls, by tool and result", ["tool", "ok"])
TOOL_SECONDS = Histogram("toolq_worker_tool_seconds", "Tool execution time", ["tool"])

SLOTS = Gauge("toolq_worker_slots", "Sequences the engine decodes together in one context")
SLOTS_BUSY = Gauge("toolq_worker_slots_busy", "Sequences generating now")
STEPS = Counter("toolq_worker_decode_steps_total", "llama_decode steps (each one batch)")
BATCH_SEQUENCES = Counter(
    "toolq_worker_batch_sequences_total", "Sequences in each decode step, summed: divided by steps, the mean batch size"
)
PREFILL_TOKENS = Counter("toolq_worker_prefill_tokens_total", "Prompt tokens evaluated")
DECODE_TOKENS = Counter("toolq_worker_decode_tokens_total", "Tokens generated")
BATCH_SIZE = Gauge("toolq_worker_batch_size", "Mean sequences per decode step over the last few seconds")
PREFILL_TPS = Gauge("toolq_worker_prefill_tokens_per_second", "Prompt tokens evaluated per second, last few seconds")
# Saved sequence state (worker/engine/tiers/). A hit: a prompt served (in part) from that source
# (slot, slot_copy, host, disk); a miss: a prompt the host or disk tier could not serve.
CACHE_HITS = Counter("toolq_worker_kv_cache_hits_total", "Prompts whose cached prefix came from this source", ["tier"])
CACHE_MISSES = Counter("toolq_worker_kv_cache_misses_total", "Prompts a saved-state tier could not serve", ["tier"])
CACHE_BYTES = Gauge("toolq_worker_kv_cache_bytes", "Bytes of saved sequence state held", ["tier"])
CACHE_ENTRIES = Gauge("toolq_worker_kv_cache_states", "Saved sequence states held", ["tier"])
CACHE_REFUSED = Counter("toolq_worker_kv_cache_refused_files_total", "State files refused and deleted")
_TIMING_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CACHE_RESTORE_SECONDS = Histogram(
    "toolq_worker_kv_restore_seconds",
    "Setting a saved state into a slot: each stretch of its pieces between two steps",
    ["tier"],
    buckets=_TIMING_BUCKETS,
)
CACHE_SAVE_SECONDS = Histogram(
    "toolq_worker_kv_save_seconds",
    "Saving a state: copy (on the decode thread: each stretch between two steps, what it held the other "
    "slots up) and write (the tiers' thread)",
    ["stage"],
    buckets=_TIMING_BUCKETS,
)
DECODE_TPS = Gauge("toolq_worker_decode_tokens_per_second", "Tokens generated per second, last few seconds")


def observe_result(outcome: str, result: JobResult) -> None:
    JOBS.labels(outcome).inc()
    PROMPT_TOKENS.inc(result.usage.prompt_tokens)
    CACHED_TOKENS.inc(result.usage.cached_prompt_tokens)
    COMPLETION_TOKENS.inc(result.usage.completion_tokens)
    if result.iterations:
        ITERATIONS.observe(result.iterations)
    GENERATE_SECONDS.observe(result.timings.generate_ms / 1000)


def observe_tool(tool: str, ok: bool, duration_ms: float) -> None:
    TOOL_CALLS.labels(tool, "true" if ok else "false").inc()
    TOOL_SECONDS.labels(tool).observe(duration_ms / 1000)


@dataclass(frozen=True)
class EngineRates:
    batch_size: float = 0.0
    prefill_tps: float = 0.0
    decode_tps: float = 0.0


class EngineWatch:
    """Turns an engine's counters into the Prometheus metrics and rates over a sliding window.

    The heartbeat calls ``update`` every beat; the rates go into the worker's fleet entry too.
    """

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self._samples: deque[tuple[float, int, int, int, int]] = deque()
        self._hits: dict[str, int] = {}
        self._misses: dict[str, int] = {}
        self._refused = 0

    def update(self, stats: EngineStats, now: float) -> EngineRates:
        sample = (now, stats.steps, stats.batch_sequences, stats.prefill_tokens, stats.decode_tokens)
        if self._samples:
            _, steps, seqs, prefill, decode = self._samples[-1]
            STEPS.inc(sample[1] - steps)
            BATCH_SEQUENCES.inc(sample[2] - seqs)
            PREFILL_TOKENS.inc(sample[3] - prefill)
            DECODE_TOKENS.inc(sample[4] - decode)
        self._samples.append(sample)
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        first = self._samples[0]
        span = now - first[0]
        steps = sample[1] - first[1]
        rates = EngineRates(
            batch_size=(sample[2] - first[2]) / steps if steps else 0.0,
            prefill_tps=(sample[3] - first[3]) / span if span > 0 else 0.0,
            decode_tps=(sample[4] - first[4]) / span if span > 0 else 0.0,
        )
        self._cache(stats)
        SLOTS.set(stats.slots)
        SLOTS_BUSY.set(stats.busy)
        BATCH_SIZE.set(rates.batch_size)
        PREFILL_TPS.set(rates.prefill_tps)
        DECODE_TPS.set(rates.decode_tps)
        return rates

    def _cache(self, stats: EngineStats) -> None:
        cache = stats.cache
        for seen, now_counts, counter in (
            (self._hits, cache.hits, CACHE_HITS),
            (self._misses, cache.misses, CACHE_MISSES),
        ):
            for tier, n in list(now_counts.items()):
                if n > seen.get(tier, 0):
                    counter.labels(tier).inc(n - seen.get(tier, 0))
                seen[tier] = n
        if cache.refused_files > self._refused:
            CACHE_REFUSED.inc(cache.refused_files - self._refused)
            self._refused = cache.refused_files
        for tier, n in list(cache.bytes.items()):
            CACHE_BYTES.labels(tier).set(n)
        for tier, n in list(cache.entries.items()):
            CACHE_ENTRIES.labels(tier).set(n)
        while cache.timings:
            kind, label, seconds = cache.timings.popleft()
            (CACHE_RESTORE_SECONDS if kind == "restore" else CACHE_SAVE_SECONDS).labels(label).observe(seconds)


def serve_metrics(port: int) -> None:
    start_http_server(port)
