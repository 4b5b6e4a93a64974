"""The hostile-tenant soak (tests/support/hostile_soak.py): tenant B's p95 time to `final` beside
a hostile tenant A, as a ratio against B's quiet run measured in the same run; the worker loop's
longest stall; how each of A's hostile requests ended. One real worker (the bundled SmolLM2), one
gateway, a private redis-server. Exits 1 when a target is missed: a hostile request answered
badly (5xx, dropped, never ended), one of B's jobs not `final`, a dead worker, a stall of 1 s or
more in the worker's loop or of 100 ms or more in the gateway's (gateway/loop_watch.py, read from
/metrics; `/healthz` seen from a process beside it is printed too), or B's p95 above 1.5x its
quiet run.

Run: .venv/bin/python bench/bench_hostile_tenant.py [--b-jobs 24] [--b-gap-s 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.hostile_soak import run_soak
from tests.support.redis_server import RedisServer


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--b-jobs", type=int, default=24, help="tenant B's jobs in each run (quiet, then beside A)")
    p.add_argument("--b-gap-s", type=float, default=1.0, help="pause between two of B's jobs")
    p.add_argument("--max-queue-depth", type=int, default=24)
    p.add_argument("--only", default="", help="comma-separated hostile classes (tests/support/hostile_requests.py)")
    a = p.parse_args()
    server = RedisServer()
    server.start()
    try:
        only = set(filter(None, a.only.split(",")))
        soak = run_soak(server.url, b_jobs=a.b_jobs, b_gap_s=a.b_gap_s, max_queue_depth=a.max_queue_depth, only=only)
        report = asyncio.run(soak)
    finally:
        server.stop()
    print("\n".join(report.lines()))
    missed = (
        report.bad
        or set(report.b_endings) != {"final"}
        or not report.worker_alive
        or report.stall_ms >= 1000
        or report.ratio > 1.5
        or report.gateway is None
        or report.gateway.longest_ms > 100
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
