"""Fair share against plain FIFO, in one run (scripted engine, real Redis, real worker processes).

- Flood: tenant A submits --flood jobs, then tenant B one; B's wait (its `queued` to `started`
  events) and the mean job duration, with one worker of two slots (the issue's setting).
- Shares: tenant A (weight 3) submits its whole backlog, then tenant B (weight 1) its own; the
  tenants' shares of the first 400 starts, and the error against 75/25.
- Pickup: enqueue to `started` with the worker idle (bench/bench_queue.py's measure), through the
  fair waiting sets to a worker that dispatches before each look at the queue, and straight onto
  arq's queue to a worker with fair share off (``TOOLQ_FAIR_SHARE=false``: plain FIFO, no
  dispatch). Both workers run side by side, each serving a model of its own, and the jobs
  alternate between them, so a change of the machine's load falls on both alike: the difference
  is the latency the scheduler adds.

- Inside the batch (the real bundled model, bench/batch_fairness.py): tenant B's short jobs
  p95 on a quiet engine and beside tenant A's flood of long prompts and long answers, and their
  ratio (target 1.5x); the batch's tokens per second with the virtual token counters and
  without, for one tenant alone and two of equal weight (target 0.95x).

Run: .venv/bin/python bench/bench_fairness.py [--flood 200] [--pickup-jobs 200] [--pickup-only]
     [--batch-only] [--b-jobs 12] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from store.submission import Submission

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from bench.bench_queue import pct, pickup_one
from store import keys
from store.jobstore import JobStore
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules
from toolq.tenants import TenantPolicy
from toolq.wire.protocol import JobRequest, Message

MODEL = "scripted"


def req() -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="go")], tools=[], max_tokens=4096)


def times(r: redis.Redis, job_id: str) -> dict[str, int]:
    """The job's first queued / started / terminal timestamps (ms)."""
    out: dict[str, int] = {}
    for _, f in r.xrange(keys.log(job_id)):
        ev = json.loads(f[b"e"])
        out.setdefault(ev["type"], ev["ts"])
    return out


def wait(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.05)


def flood(url: str, fair: bool, n: int) -> tuple[float, float]:
    """B's wait (ms) behind A's flood of n jobs, and the mean job duration (ms)."""
    r = redis.Redis.from_url(url)
    r.flushdb()
    w = WorkerProcess(url, script=write_rules([("", "x" * 80)], token_delay_s=0.003), extra=("--slots", "2"))
    w.wait_ready()

    async def go() -> tuple[list[str], str]:
        store = JobStore.from_url(url, fair=fair)
        try:
            a = [(await store.submit(Submission(req(), model=MODEL, tenant="a")))[0] for _ in range(n)]
            await asyncio.sleep(0.5)
            return a, (await store.submit(Submission(req(), model=MODEL, tenant="b")))[0]
        finally:
            await store.close()

    try:
        a, b = asyncio.run(go())
        wait(lambda: "final" in times(r, b), 600)
        tb = times(r, b)
        durations = [t["final"] - t["started"] for t in (times(r, j) for j in a) if "final" in t]
        return float(tb["started"] - tb["queued"]), statistics.mean(durations)
    finally:
        w.stop()


def shares(url: str, fair: bool) -> Counter[str]:
    """Shares of the first 400 starts with weights 3:1, A's backlog submitted before B's."""
    r = redis.Redis.from_url(url)
    r.flushdb()

    async def go() -> dict[str, list[str]]:
        store = JobStore.from_url(url, fair=fair)
        try:
            out: dict[str, list[str]] = {}
            for tenant, n, weight in (("a", 340, 3), ("b", 140, 1)):
                policy = TenantPolicy(weight=weight)
                out[tenant] = [
                    (await store.submit(Submission(req(), model=MODEL, tenant=tenant, policy=policy)))[0]
                    for _ in range(n)
                ]
            return out
        finally:
            await store.close()

    jobs = asyncio.run(go())
    w = WorkerProcess(url, script=write_rules([("", "x" * 8)], token_delay_s=0.002), extra=("--slots", "2"))
    try:
        w.wait_ready()
        every = [j for ids in jobs.values() for j in ids]
        wait(lambda: sum(1 for j in every if "started" in times(r, j)) >= 400, 600)
    finally:
        w.stop()
    started = sorted((times(r, j)["started"], t) for t, ids in jobs.items() for j in ids if "started" in times(r, j))
    return Counter(t for _, t in started[:400])


def pickup_pairs(url: str, n: int) -> dict[str, tuple[list[float], list[float]]]:
    """n jobs each, alternating: FIFO (worker with fair share off) and fair (dispatch)."""
    rules = write_rules([("", "ok")])
    fifo = WorkerProcess(url, script=rules, name="fifo", env={"TOOLQ_FAIR_SHARE": "false"})
    fair = WorkerProcess(url, script=rules, name="fair")

    async def go() -> dict[str, tuple[list[float], list[float]]]:
        stores = {"fifo": JobStore.from_url(url), "fair": JobStore.from_url(url, fair=True)}
        out: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in stores}
        try:
            for i in range(n + 3):
                for model, store in stores.items():
                    srv, cli = await pickup_one(store, f"job {i}", model)
                    if i >= 3:  # the first jobs warm connections up
                        out[model][0].append(srv)
                        out[model][1].append(cli)
        finally:
            for store in stores.values():
                await store.close()
        return out

    try:
        fifo.wait_ready()
        fair.wait_ready()
        return asyncio.run(go())
    finally:
        fifo.stop()
        fair.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flood", type=int, default=200, help="tenant A's flood")
    ap.add_argument("--pickup-jobs", type=int, default=200)
    ap.add_argument("--pickup-only", action="store_true", help="only the pickup latency")
    ap.add_argument("--batch-only", action="store_true", help="only tenants inside one batch (real model)")
    ap.add_argument("--b-jobs", type=int, default=12, help="B's jobs quiet, and again beside A's flood")
    ap.add_argument("--rounds", type=int, default=3, help="throughput runs, counters on and off alternating")
    args = ap.parse_args()
    if args.batch_only:
        return in_batch(args.b_jobs, args.rounds)
    server = RedisServer()
    server.start()
    url = server.url + "/0"
    try:
        print(f"flood: tenant A submits {args.flood} jobs, then tenant B one (1 worker, 2 slots)")
        for name, fair in (("FIFO", False), ("fair", True)) if not args.pickup_only else ():
            b_wait, mean = flood(url, fair, args.flood)
            print(f"  {name:5s} B waited {b_wait:8.0f} ms = {b_wait / mean:6.1f} mean job durations ({mean:.0f} ms)")
        print("shares of the first 400 starts, weights A 3 : B 1 (A's backlog submitted first)")
        for name, fair in (("FIFO", False), ("fair", True)) if not args.pickup_only else ():
            c = shares(url, fair)
            err = abs(c["a"] / 400 - 0.75) * 100
            print(f"  {name:5s} A {c['a']:3d}  B {c['b']:3d}   share error {err:5.1f} points (target within 5)")
        print("pickup, enqueue -> started, worker idle, the two alternating job by job")
        print("  (server clock: whole ms; client-observed in brackets: submit call to `started` read back)")
        redis.Redis.from_url(url).flushdb()
        res = pickup_pairs(url, args.pickup_jobs)
        for name, model in (("FIFO (arq queue)", "fifo"), ("fair (dispatch)", "fair")):
            srv, cli = res[model]
            print(
                f"  {name:17s} n={args.pickup_jobs}  p50 {pct(srv, 50):5.1f} ms  p99 {pct(srv, 99):5.1f} ms"
                f"   [client p50 {pct(cli, 50):6.2f} ms  p99 {pct(cli, 99):6.2f} ms]"
            )
        (_, fifo), (_, fair_c) = res["fifo"], res["fair"]
        print(
            f"  added by the scheduler (client-observed): p50 {pct(fair_c, 50) - pct(fifo, 50):+.2f} ms"
            f"  p99 {pct(fair_c, 99) - pct(fifo, 99):+.2f} ms   (target: p50 within 1 ms)"
        )
    finally:
        server.stop()
    if not args.pickup_only:
        in_batch(args.b_jobs, args.rounds)


def in_batch(b_jobs: int, rounds: int) -> None:
    """Tenants inside one engine's batch, on the real model (bench/batch_fairness.py)."""
    from bench import batch_fairness as bf

    print("inside the batch (real model, 1 engine, 4 slots, prompt chunk 32, host tier on)")
    eng = bf.engine(fair=True)
    try:
        got = bf.beside_flood(eng, b_jobs=b_jobs)
    finally:
        eng.close()
    print(
        f"  B's job p95 quiet {got['quiet_p95'] * 1000:6.0f} ms, beside A's flood {got['beside_p95'] * 1000:6.0f} ms:"
        f" {got['ratio']:.2f}x (target <= 1.5x)"
        f"   [p50 {got['quiet_p50'] * 1000:.0f} / {got['beside_p50'] * 1000:.0f} ms;"
        f" A meanwhile: {got['a_tokens']:.0f} tokens, {got['a_done']:.0f} jobs done;"
        f" sequences set aside {got['set_aside']:.0f}]"
    )
    for name, tenants in (("one tenant alone", {"a": 4}), ("two equal tenants", {"a": 2, "b": 2})):
        on: list[float] = []
        off: list[float] = []
        for _ in range(rounds):
            for fair, out in ((True, on), (False, off)):
                eng = bf.engine(fair=fair)
                try:
                    out.append(bf.throughput(eng, tenants))
                finally:
                    eng.close()
        a, b = statistics.median(on), statistics.median(off)
        print(f"  {name:17s} batch tokens/s with counters {a:6.1f}, without {b:6.1f}: {a / b:.3f}x (target >= 0.95x)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
