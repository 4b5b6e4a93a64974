"""The hostile-tenant soak: tenant B submits steady real-model tool-calling jobs, first alone
(its quiet run) and then while tenant A sends every class of tests/support/hostile_requests.py,
mixed, on one gateway and one real worker. It measures B's time to ``final`` in both runs, how
each hostile request ended, and the worker loop's longest stall, read from outside the worker as
the longest gap between two of its heartbeats (the heartbeat is a task on the worker's event loop,
so a blocked loop stops it) less the heartbeat interval.

bench/bench_hostile_tenant.py prints the figures; tests/e2e/test_hostile_tenant.py runs a short
form and holds the issue's bounds.
"""

from __future__ import annotations

import asyncio
import json
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import redis

from store import keys
from tests.support.gateways import GatewayProcess
from tests.support.healthz_probe import HealthzProbe
from tests.support.hostile_requests import HOSTILE, Outcome, job_end
from tests.support.loop_lag import Stalls, lag_buckets, stalls
from tests.support.workers import WorkerProcess

KEYS = {"ka": "a", "kb": "b"}
METRICS_KEY = {"X-API-Key": "kb"}
HEARTBEAT_MS = 250
ROUND_PAUSE_S = 1.0  # between two rounds of tenant A's classes: a stubborn tenant, not a DoS of the HTTP server
# The worker's address-space cap: a grammar that would grow without bound (23.9 GB once, before
# the bounds) fails inside the worker instead of taking the machine's other processes with it.
WORKER_MEMORY_BYTES = 8 << 30
B_JOB = {
    "messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}],
    "tools": ["calculate_zorbix"],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "max_tokens": 64,
    "max_iterations": 3,
}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


@dataclass
class SoakReport:
    quiet_s: list[float] = field(default_factory=list)
    loaded_s: list[float] = field(default_factory=list)
    b_endings: Counter[str] = field(default_factory=Counter)
    outcomes: list[Outcome] = field(default_factory=list)
    longest_gap_ms: int = 0
    healthz_worst_ms: int = 0  # the gateway's loop, seen from outside (tests/support/healthz_probe.py)
    gateway: Stalls | None = None  # the gateway's loop during A's attack, seen from inside (gateway/loop_watch.py)
    worker_alive: bool = True
    hostile_s: float = 0.0

    @property
    def ratio(self) -> float:
        return pct(self.loaded_s, 0.95) / pct(self.quiet_s, 0.95)

    @property
    def stall_ms(self) -> int:
        return max(0, self.longest_gap_ms - HEARTBEAT_MS)

    @property
    def bad(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.bad]

    def lines(self) -> list[str]:
        by_class: dict[str, Counter[str]] = {}
        for o in self.outcomes:
            by_class.setdefault(o.cls, Counter())[o.how] += 1
        out = [
            f"tenant B p95 to final: quiet {pct(self.quiet_s, 0.95):.2f} s ({len(self.quiet_s)} jobs), "
            f"beside tenant A {pct(self.loaded_s, 0.95):.2f} s ({len(self.loaded_s)} jobs): "
            f"ratio {self.ratio:.2f}x (target <= 1.5x)",
            f"tenant B endings: {dict(self.b_endings)}",
            f"worker loop's longest stall: {self.stall_ms} ms (heartbeat gap {self.longest_gap_ms} ms, "
            f"interval {HEARTBEAT_MS} ms; target < 1000 ms); worker alive: {self.worker_alive}",
            f"gateway loop's longest stall: {self.gateway.longest if self.gateway else '?'} "
            f"(target <= 100 ms; {self.gateway.count if self.gateway else 0} wake-ups of its 20 ms timer); "
            f"/healthz worst, from a process beside it: {self.healthz_worst_ms} ms",
            f"tenant A: {len(self.outcomes)} hostile requests over {self.hostile_s:.0f} s, {len(self.bad)} bad",
        ]
        out += [f"  {cls:32} {', '.join(f'{h} x{n}' for h, n in c.most_common())}" for cls, c in by_class.items()]
        return out


class HeartbeatWatch:
    """Polls the worker's fleet entry and keeps the longest gap between two heartbeats."""

    def __init__(self, redis_url: str, worker_id: str):
        self.r = redis.Redis.from_url(redis_url)
        self.key = keys.worker(worker_id)
        self.longest_ms = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = None
        while not self._stop.wait(0.02):
            raw = self.r.hget(self.key, "heartbeat_ms")
            beat = int(raw) if raw else None
            if beat is not None and last is not None and beat != last:
                self.longest_ms = max(self.longest_ms, beat - last)
            last = beat if beat is not None else last

    def __enter__(self) -> HeartbeatWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def b_job(http: httpx.AsyncClient) -> tuple[float, str]:
    t0 = time.monotonic()
    r = await http.post("/v1/jobs", json=B_JOB, headers={"X-API-Key": "kb"})
    if r.status_code != 202:
        return time.monotonic() - t0, f"refused {r.status_code}"
    end = await job_end(http, r.json()["job_id"], "kb", 300)
    return time.monotonic() - t0, end["type"] if end else "never ended"


async def b_run(http: httpx.AsyncClient, n: int, gap_s: float, into: list[float], endings: Counter[str]) -> None:
    """``n`` of B's jobs, one after another with ``gap_s`` between them (a steady caller)."""
    for _ in range(n):
        took, how = await b_job(http)
        endings[how] += 1
        if how == "final":
            into.append(took)
        await asyncio.sleep(gap_s)


async def hostile(http: httpx.AsyncClient, stop: asyncio.Event, outcomes: list[Outcome], only: set[str]) -> None:
    """Every class (of ``only``, when given) in turn, two at a time, until ``stop`` is set and one
    whole round is done."""
    classes = [h for h in HOSTILE if not only or h.__name__ in only]
    rounds = 0
    while not (stop.is_set() and rounds > 0):
        for i in range(0, len(classes), 2):
            outcomes.extend(await asyncio.gather(*(h(http, "ka") for h in classes[i : i + 2])))
        rounds += 1
        await asyncio.sleep(ROUND_PAUSE_S)


def gateway_env(max_queue_depth: int) -> dict[str, str]:
    return {
        "TOOLQ_API_KEYS": ",".join(f"{k}:{t}" for k, t in KEYS.items()),
        "TOOLQ_MAX_QUEUE_DEPTH": str(max_queue_depth),
        "TOOLQ_TENANTS": json.dumps({"*": {"max_running": 2}}),
    }


async def run_soak(
    redis_url: str,
    *,
    b_jobs: int = 12,
    b_gap_s: float = 0.5,
    max_queue_depth: int = 24,
    only: set[str] | frozenset[str] = frozenset(),
) -> SoakReport:
    report = SoakReport()
    worker = WorkerProcess(
        redis_url,
        tools=("worker.demo_tools",),
        # niced as docker-compose.yml runs it beside the gateway
        env={"TOOLQ_HEARTBEAT_MS": str(HEARTBEAT_MS), "TOOLQ_LEASE_MS": "3000", "TOOLQ_WORKER_NICE": "5"},
    )
    resource.prlimit(worker.proc.pid, resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    worker.wait_ready(180)
    gateway = GatewayProcess(redis_url, env=gateway_env(max_queue_depth)).wait_ready()
    try:
        assert worker.worker_id is not None
        async with httpx.AsyncClient(base_url=gateway.url, timeout=httpx.Timeout(60, read=300)) as http:
            await b_run(http, 1, 0, [], Counter())  # warm the model's first prompt out of the quiet run
            with HeartbeatWatch(redis_url, worker.worker_id) as watch:
                await b_run(http, b_jobs, b_gap_s, report.quiet_s, Counter())
                stop = asyncio.Event()
                t0 = time.monotonic()
                before = await lag_buckets(http, METRICS_KEY)
                with HealthzProbe(gateway.url) as probe:
                    a = asyncio.ensure_future(hostile(http, stop, report.outcomes, set(only)))
                    await asyncio.sleep(1)  # tenant A first: B arrives at a fleet already under attack
                    await b_run(http, b_jobs, b_gap_s, report.loaded_s, report.b_endings)
                    stop.set()
                    await a
                report.hostile_s = time.monotonic() - t0
                report.healthz_worst_ms = probe.worst_ms
                report.gateway = stalls(before, await lag_buckets(http, METRICS_KEY))
            report.longest_gap_ms = watch.longest_ms
        report.worker_alive = worker.proc.poll() is None
    finally:
        gateway.stop()
        worker.stop()
    return report
