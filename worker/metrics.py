"""The worker's own Prometheus metrics (no job or tenant ids as labels)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

from toolq.protocol import JobResult

JOBS = Counter("toolq_worker_jobs_total", "Jobs ended by this worker, by outcome", ["outcome"])
PROMPT_TOKENS = Counter("toolq_worker_prompt_tokens_total", "Prompt tokens (cached ones included)")
CACHED_TOKENS = Counter("toolq_worker_cached_prompt_tokens_total", "Prompt tokens reused from the cache")
COMPLETION_TOKENS = Counter("toolq_worker_completion_tokens_total", "Tokens generated")
ITERATIONS = Histogram("toolq_worker_iterations", "Generation rounds per job", buckets=(1, 2, 3, 4, 5, 7, 10, 20))
GENERATE_SECONDS = Histogram("toolq_worker_generate_seconds", "Time in the model per job")
TOOL_CALLS = Counter("toolq_worker_tool_calls_total", "Tool calls, by tool and result", ["tool", "ok"])
TOOL_SECONDS = Histogram("toolq_worker_tool_seconds", "Tool execution time", ["tool"])


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


def serve_metrics(port: int) -> None:
    start_http_server(port)
