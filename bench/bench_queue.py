"""Queue pickup and crash recovery, against arq's own behaviour measured in the same run.

Pickup: time from enqueue to the `started` event with the model idle (scripted engine that
answers instantly), over N jobs one after another, for
  - toolq (wake token on enqueue),
  - arq polling every 10 ms (anchor),
  - arq's default 0.5 s poll (fewer jobs: each waits ~250 ms).
Measured from the event timestamps the worker writes (enqueue = the `queued` event) and, as a
check, at the client (submit call to `started` read back).

Crash recovery: seconds from SIGKILL of the worker running a job to `started` (attempt 2) from a
second, already running worker; anchor: arq alone would retry after job_timeout + 10 s.

Run: .venv/bin/python bench/bench_queue.py [--jobs 200] [--kills 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from store.submission import Submission

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from store import keys
from store.jobstore import JobStore
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.payloads import StartedData
from toolq.wire.protocol import EventType, JobRequest, Message


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


async def pickup_one(store: JobStore, text: str, model: str = "scripted") -> tuple[float, float]:
    """One job's pickup with the worker idle: (``queued`` to ``started`` on the events' clock,
    submit call to ``started`` read back at the client), in ms."""
    await asyncio.sleep(0.02)  # the worker is idle and waiting, as in production
    t0 = time.perf_counter()
    job_id, _ = await store.submit(
        Submission(JobRequest(messages=[Message(role="user", content=text)], tool_choice="none"), model=model)
    )
    queued = started = None
    t_started = None
    async for ev in store.follow(job_id):
        if ev.type == EventType.queued:
            queued = ev.ts
        if ev.type == EventType.started:
            started, t_started = ev.ts, time.perf_counter()
        if ev.terminal:
            break
    assert queued is not None and started is not None and t_started is not None
    return float(started - queued), (t_started - t0) * 1000


async def pickup(url: str, jobs: int, fair: bool = False) -> tuple[list[float], list[float]]:
    """``fair``: submit through the fair-share waiting sets (store/fair.py), as the gateway does."""
    store = JobStore.from_url(url, fair=fair)
    server_side, client_side = [], []
    try:
        for i in range(jobs + 3):
            srv, cli = await pickup_one(store, f"job {i}")
            if i >= 3:  # the first jobs warm connections up
                server_side.append(srv)
                client_side.append(cli)
    finally:
        await store.close()
    return server_side, client_side


def run_pickup(url: str, jobs: int, env: dict[str, str], fair: bool = False) -> tuple[list[float], list[float]]:
    rules = write_rules([("", "ok")])
    w = WorkerProcess(url, script=rules, env=env).wait_ready()
    try:
        return asyncio.run(pickup(url, jobs, fair))
    finally:
        w.stop()


async def _submit(url: str, text: str) -> str:
    store = JobStore.from_url(url)
    try:
        return (
            await store.submit(
                Submission(
                    JobRequest(messages=[Message(role="user", content=text)], tool_choice="none", max_tokens=30000),
                    model="scripted",
                )
            )
        )[0]
    finally:
        await store.close()


async def _wait_started(url: str, job_id: str, attempt: int) -> tuple[float, str]:
    store = JobStore.from_url(url)
    try:
        async for ev in store.follow(job_id):
            if ev.type == EventType.started and (started := StartedData.of(ev)).attempt == attempt:
                return time.monotonic(), started.worker
            if ev.terminal:
                raise RuntimeError(f"job ended before attempt {attempt} started: {ev}")
    finally:
        await store.close()
    raise RuntimeError("stream ended")


def run_recovery(url: str, kills: int) -> list[float]:
    import redis

    r = redis.Redis.from_url(url)
    rules = write_rules([("", "s" * 200000)], token_delay_s=0.002)
    env = {"TOOLQ_LEASE_MS": "2000", "TOOLQ_HEARTBEAT_MS": "500"}  # the defaults, stated
    out = []
    for _ in range(kills):
        a = WorkerProcess(url, script=rules, env=env).wait_ready()
        b = WorkerProcess(url, script=rules, env=env).wait_ready()
        try:
            job_id = asyncio.run(_submit(url, "long"))
            _, owner_id = asyncio.run(_wait_started(url, job_id, 1))
            owner = next(w for w in (a, b) if w.worker_id == owner_id)
            time.sleep(0.3)
            t_kill = time.monotonic()
            owner.kill()
            t_started, _ = asyncio.run(_wait_started(url, job_id, 2))
            out.append(t_started - t_kill)
            r.set(keys.cancel(job_id), 1)
        finally:
            a.stop()
            b.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--default-jobs", type=int, default=40, help="jobs for arq's 0.5 s default poll")
    ap.add_argument("--kills", type=int, default=3)
    args = ap.parse_args()
    server = RedisServer()
    server.start()
    url = server.url + "/0"
    try:
        ours = run_pickup(url, args.jobs, {})
        arq10 = run_pickup(url, args.jobs, {"TOOLQ_WAKE_ON_ENQUEUE": "false", "TOOLQ_POLL_DELAY_S": "0.01"})
        arq500 = run_pickup(url, args.default_jobs, {"TOOLQ_WAKE_ON_ENQUEUE": "false", "TOOLQ_POLL_DELAY_S": "0.5"})
        print("queue pickup, enqueue -> started, model idle (server clock, ms; client-observed in brackets)")
        for name, (srv, cli), n in (
            ("toolq wake-on-enqueue", ours, args.jobs),
            ("arq poll 10 ms (anchor)", arq10, args.jobs),
            ("arq poll 0.5 s (default)", arq500, args.default_jobs),
        ):
            print(
                f"  {name:26s} n={n:4d}  p50 {pct(srv, 50):6.1f} ms  p99 {pct(srv, 99):6.1f} ms"
                f"   [client p50 {pct(cli, 50):6.2f} ms  p99 {pct(cli, 99):6.2f} ms]"
            )
        print(
            f"  ratio toolq / arq-10ms: p50 {pct(ours[1], 50) / pct(arq10[1], 50):.2f}  "
            f"p99 {pct(ours[1], 99) / pct(arq10[1], 99):.2f}  (client-observed)"
        )
        rec = run_recovery(url, args.kills)
        anchor = 300 + 10  # arq: job_timeout (default 300 s) + 10 s before another worker retries
        print(
            "crash recovery, SIGKILL -> started (attempt 2) on the second worker: "
            + ", ".join(f"{x:.2f} s" for x in rec)
            + f"; median {statistics.median(rec):.2f} s = {statistics.median(rec) / anchor:.4f} of arq's {anchor} s"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
