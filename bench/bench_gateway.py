"""End-to-end overhead of the gateway, and how throughput grows with worker processes.

    .venv/bin/python bench/bench_gateway.py [--jobs 500] [--redis URL] [--tracing-only]

Everything real except the model: a redis-server of its own, `toolq gateway` and
`toolq worker --engine scripted` as separate processes, HTTP over a socket.

1. Latency: POST /v1/jobs, then GET its SSE stream until the `final` event; p50 and p99 over
   ``--jobs`` jobs, one at a time, with a worker that answers instantly. Anchors measured in the
   same run: a Redis PING round trip, and the same jobs submitted and followed straight through
   JobStore (the SDK's Redis mode, no HTTP), which is the floor the gateway adds to.
2. Tracing: the same POST -> `final` latency through two fresh gateway + worker pairs, one
   untraced and one tracing (OpenTelemetry on, exporting over OTLP/HTTP to a receiver in this
   process that discards, with the SDK's default batching), interleaved in blocks so both see
   the same load: p50, p99, the ratio on / off, and CPU per job of each pair, exports included.
   Target: at most 1.10 at p50.
3. Throughput: jobs that each hold their worker for 50 ms (scripted token_delay_s), submitted
   through the gateway as fast as it takes them, with 1 and with 4 worker processes: end to end
   (first submit to last final) and drain (once every job is in, to the last final). The 4-worker
   figures are given as ratios of the 1-worker ones, measured in the same run.

On a 2-core machine every process of the system shares the same two cores, so per-job CPU (the
worker's template rendering, the gateway's HTTP handling, the client's) sets a ceiling that says
more about the machine than about the design; the per-process CPU per job is printed to show it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from store.submission import Submission

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from store.jobstore import JobStore  # noqa: E402
from tests.support.endings import Endings  # noqa: E402
from tests.support.gateways import GatewayProcess  # noqa: E402
from tests.support.otlp_receiver import OtlpReceiver  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402  (the same spawned redis-server the tests use)
from tests.support.workers import WorkerProcess, write_rules  # noqa: E402
from toolq.wire.protocol import JobRequest, Message  # noqa: E402

HOLD_S = 0.05  # how long each throughput job keeps its worker busy
EXPORT_S = 5.5  # a little over the SDK's batch delay (OTEL_BSP_SCHEDULE_DELAY, 5 s by default)
JOB = {"messages": [{"role": "user", "content": "hi"}]}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; Linux /proc, 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU per job of each process of the system over one series."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids

    def __enter__(self) -> CpuMeter:
        self.start = {name: cpu_s(pid) for name, pid in self.pids.items()}
        self.client_start = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.used = {name: cpu_s(pid) - self.start[name] for name, pid in self.pids.items()}
        self.used["client"] = time.process_time() - self.client_start

    def per_job(self, n: int) -> str:
        return ", ".join(f"{name} {used * 1000 / n:.1f}" for name, used in self.used.items())


def start_workers(
    redis_url: str, model: str, n: int, delay_s: float, env: dict[str, str] | None = None
) -> list[WorkerProcess]:
    script = write_rules([("", "ok")], token_delay_s=delay_s)  # "ok" is one scripted token
    workers = [
        WorkerProcess(redis_url, script=script, name=model, tools=("worker.demo_tools",), env=env) for _ in range(n)
    ]
    return [w.wait_ready() for w in workers]


def stop_all(workers: list[WorkerProcess]) -> None:
    for w in workers:
        w.stop()


# ---------------------------------------------------------------------- latency


async def ping_rtt_ms(store: JobStore, n: int = 2000) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await store.redis.ping()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def direct_latency_ms(store: JobStore, model: str, n: int) -> list[float]:
    out = []
    request = JobRequest(messages=[Message(role="user", content="hi")])
    for _ in range(n):
        t = time.perf_counter()
        job_id, _ = await store.submit(Submission(request, model=model))
        async for ev in store.follow(job_id):
            if ev is not None and ev.terminal:
                break
        out.append((time.perf_counter() - t) * 1000)
    return out


async def gateway_latency_ms(url: str, model: str, n: int) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for _ in range(n):
            t = time.perf_counter()
            r = await http.post("/v1/jobs", json={**JOB, "model": model})
            r.raise_for_status()
            async with http.stream("GET", r.json()["links"]["events"]) as resp:
                async for line in resp.aiter_lines():
                    if line == "event: final":
                        break
            out.append((time.perf_counter() - t) * 1000)
    return out


# ---------------------------------------------------------------------- tracing


async def tracing_cost(redis_url: str, n_jobs: int, block: int = 25) -> float:
    """Section 2; returns p50 on / off. Two fresh pairs started alike, each its own gateway and
    worker: one untraced (model "untraced"), one tracing (model "traced") with the SDK's default
    batch processor (an export every 5 s or 512 spans) to a receiver that reads each payload and
    throws it away. Blocks alternate so that the load on a shared machine, and the traced pair's
    exports, fall on both series alike; CPU per job of each pair is counted over the whole
    section, the last export included."""
    with OtlpReceiver(keep=False) as sink:
        pairs = {}
        for name, env in (("untraced", None), ("traced", sink.env(delay_ms=None))):
            gw = GatewayProcess(redis_url, env=env)
            workers = start_workers(redis_url, name, 1, 0.0, env=env)
            pairs[name] = (gw.wait_ready(), workers)  # /readyz wants a registered worker
        pids = {name: (gw.proc.pid, workers[0].proc.pid) for name, (gw, workers) in pairs.items()}
        try:
            await asyncio.sleep(1.1)  # the gateways' registry caches (1 s) see both workers
            for name, (gw, _) in pairs.items():
                await gateway_latency_ms(gw.url, name, 20)  # warm up
            await asyncio.sleep(EXPORT_S)  # the warm-up's spans leave before the count starts
            cpu_start = {name: [cpu_s(p) for p in ps] for name, ps in pids.items()}
            latency: dict[str, list[float]] = {name: [] for name in pairs}
            for _ in range(max(1, n_jobs // block)):
                for name, (gw, _) in pairs.items():
                    latency[name] += await gateway_latency_ms(gw.url, name, block)
            await asyncio.sleep(EXPORT_S)  # the last batch is exported
            # (gateway, worker) CPU seconds over the section
            cpu = {name: [cpu_s(p) - c for p, c in zip(ps, cpu_start[name], strict=True)] for name, ps in pids.items()}
            exported = sink.requests
        finally:
            for gw, workers in pairs.values():
                stop_all(workers)
                gw.stop()
    off, on = latency["untraced"], latency["traced"]
    p50_off, p99_off = statistics.median(off), pct(off, 99)
    p50_on, p99_on = statistics.median(on), pct(on, 99)
    (gw_off, w_off), (gw_on, w_on) = ([c * 1000 / len(off) for c in cpu[n]] for n in ("untraced", "traced"))
    cpu_off, cpu_on = gw_off + w_off, gw_on + w_on
    print(f"\n2. tracing, POST /v1/jobs -> SSE `final`, {len(off)} jobs each, interleaved in blocks of {block}")
    print(f"   tracing off                                  p50 {p50_off:7.2f} ms   p99 {p99_off:7.2f} ms")
    print(f"   tracing on (OTLP/HTTP to a local sink)       p50 {p50_on:7.2f} ms   p99 {p99_on:7.2f} ms")
    print(f"   on / off: p50 {p50_on / p50_off:.3f}x, p99 {p99_on / p99_off:.3f}x")
    print(
        f"   CPU ms per job, gateway + worker: off {gw_off:.2f} + {w_off:.2f}, on {gw_on:.2f} + {w_on:.2f}"
        f" ({cpu_on / cpu_off:.3f}x);  {exported} OTLP export requests received"
    )
    return p50_on / p50_off


# ---------------------------------------------------------------------- throughput


async def throughput(url: str, redis_url: str, model: str, n_jobs: int) -> tuple[float, float]:
    """(end to end, drain) in jobs per second.

    End to end: from the first submit to the last terminal event, submits going on alongside.
    Drain: from the moment every job is submitted to the last terminal event, counting the jobs
    that ended in that window: the workers' pace once the client and the gateway's submit path
    no longer compete with them for the CPU.
    """
    gate = asyncio.Semaphore(16)
    async with (
        Endings(redis_url) as ends,
        httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(max_connections=16)) as http,
    ):

        async def submit() -> None:
            async with gate:
                r = await http.post("/v1/jobs", json={**JOB, "model": model})
                r.raise_for_status()
                ends.expect(r.json()["job_id"])

        t0 = time.perf_counter()
        await asyncio.gather(*(submit() for _ in range(n_jobs)))
        t_submitted = time.perf_counter()
        t_end = await ends.all_ended(n_jobs, timeout=n_jobs * HOLD_S * 3 + 30)
    late = sum(1 for j in ends.mine if ends.at[j] > t_submitted)
    return n_jobs / (t_end - t0), late / (t_end - t_submitted)


# ---------------------------------------------------------------------- main


async def run(redis_url: str, n_jobs: int, redis_pid: int | None, tracing_only: bool = False) -> None:
    if tracing_only:
        print(f"toolq gateway benchmark, tracing only: {os.cpu_count()} CPU cores, {n_jobs} jobs per series")
        ratio = await tracing_cost(redis_url, n_jobs)
        print(f"\ntarget: tracing on costs at most 10% at p50: {ratio:.2f}x  {'PASS' if ratio <= 1.10 else 'FAIL'}")
        return
    gateway = GatewayProcess(redis_url)
    workers = start_workers(redis_url, "instant", 1, 0.0)
    store = JobStore.from_url(redis_url)
    try:
        gateway.wait_ready()
        http_impl = "httptools" if importlib.util.find_spec("httptools") else "h11 (pure Python)"
        loop_impl = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
        print(
            f"toolq gateway benchmark: {os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, "
            f"{n_jobs} jobs per latency series; uvicorn on {http_impl} + {loop_impl}\n"
        )
        # warm up both paths (connections, imports, the worker's first job)
        await direct_latency_ms(store, "instant", 20)
        await gateway_latency_ms(gateway.url, "instant", 20)
        ping = await ping_rtt_ms(store)
        pids = {"gateway": gateway.proc.pid, "worker": workers[0].proc.pid}
        if redis_pid:
            pids["redis"] = redis_pid
        with CpuMeter(pids) as direct_cpu:
            direct = await direct_latency_ms(store, "instant", n_jobs)
        with CpuMeter(pids) as gw_cpu:
            via_gw = await gateway_latency_ms(gateway.url, "instant", n_jobs)
        p50_ping = statistics.median(ping)
        p50_direct, p99_direct = statistics.median(direct), pct(direct, 99)
        p50_gw, p99_gw = statistics.median(via_gw), pct(via_gw, 99)
        print("1. latency, submit -> final event, worker answers instantly")
        print(f"   anchor  Redis PING round trip               p50 {p50_ping:7.3f} ms")
        print(f"   anchor  JobStore submit -> follow (no HTTP)  p50 {p50_direct:7.2f} ms   p99 {p99_direct:7.2f} ms")
        print(f"   gateway POST /v1/jobs -> SSE `final`        p50 {p50_gw:7.2f} ms   p99 {p99_gw:7.2f} ms")
        print(
            f"   gateway / direct: p50 {p50_gw / p50_direct:.2f}x, p99 {p99_gw / p99_direct:.2f}x;"
            f"  gateway p50 = {p50_gw / p50_ping:.0f} Redis round trips;"
            f"  HTTP adds {p50_gw - p50_direct:.2f} ms at p50"
        )
        print(f"   CPU ms per job, direct:  {direct_cpu.per_job(n_jobs)}")
        print(f"   CPU ms per job, gateway: {gw_cpu.per_job(n_jobs)}")
        p50_traced = await tracing_cost(redis_url, n_jobs)
        stop_all(workers)
        workers = []

        print(
            f"\n3. throughput, each job holds its worker {HOLD_S * 1000:.0f} ms "
            f"(ideal: {1 / HOLD_S:.0f} jobs/s per worker)"
        )
        e2e, drain = {}, {}
        for n_workers, n_jobs_tp in ((1, 60), (4, 320)):
            model = f"hold{n_workers}"
            workers = start_workers(redis_url, model, n_workers, HOLD_S)
            await asyncio.sleep(1.1)  # let the gateway's registry cache (1 s here) see them
            e2e[n_workers], drain[n_workers] = await throughput(gateway.url, redis_url, model, n_jobs_tp)
            stop_all(workers)
            workers = []
            ideal = n_workers / HOLD_S
            print(
                f"   {n_workers} worker{'s' if n_workers > 1 else ' '}  end to end {e2e[n_workers]:6.1f} jobs/s "
                f"({e2e[n_workers] / ideal:.2f} of ideal)   drain {drain[n_workers]:6.1f} jobs/s "
                f"({drain[n_workers] / ideal:.2f} of ideal)"
            )
        scale, scale_drain = e2e[4] / e2e[1], drain[4] / drain[1]
        print(f"   4 workers / 1 worker: end to end {scale:.2f}x, drain {scale_drain:.2f}x")

        print("\ntargets")
        print(f"   p50 POST -> final under 15 ms: {p50_gw:.2f} ms  {'PASS' if p50_gw < 15 else 'FAIL'}")
        print(f"   tracing on costs at most 10% at p50: {p50_traced:.2f}x  {'PASS' if p50_traced <= 1.10 else 'FAIL'}")
        print(
            f"   4 workers at least 3.5x 1 worker: end to end {scale:.2f}x  {'PASS' if scale >= 3.5 else 'FAIL'};"
            f"  drain {scale_drain:.2f}x  {'PASS' if scale_drain >= 3.5 else 'FAIL'}"
        )
    finally:
        stop_all(workers)
        await store.close()
        gateway.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--redis", help="use this Redis (its keys are not cleaned up) instead of a private redis-server")
    p.add_argument("--tracing-only", action="store_true", help="run section 2 (tracing off vs on) alone")
    args = p.parse_args(argv)
    server = None
    url = args.redis
    if url is None:
        server = RedisServer()
        server.start()
        url = server.url + "/0"
    try:
        asyncio.run(run(url, args.jobs, server.proc.pid if server else None, args.tracing_only))
    finally:
        if server:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
