"""Round trip of a tool-service call against a local registry tool, measured in the same run.

Service: from the worker's ToolSource publishing the call (worker/sources/services.py, through
toolq.services.ServiceCaller) to the worker holding the result, with the tool served by a
`toolq tools serve` process. Anchor: the same tool function in the worker's own registry
(worker/sources/registry.py), checked and run in the worker's process. Both start from a checked
call, as the conversation loop holds it. Calls alternate between the two, one at a time, so both
see the same machine. Target: the service at most 2 ms over local at p50.

Run: .venv/bin/python bench/bench_tools.py [--calls 500]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aredis

from tests.support.redis_server import RedisServer
from tests.support.services import ServiceProcess
from toolq.tools import load_tool_modules
from worker.sources.registry import RegistrySource
from worker.sources.services import ServiceSource
from worker.toolbox import ToolSource

TOOL_MODULE = "tests.support.service_tools"
WARMUP = 20
TARGET_MS = 2.0


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


async def one(source: ToolSource, i: int) -> float:
    checked = source.check("echo", {"text": f"hello {i}"})
    t0 = time.perf_counter()
    out = await source.run(
        checked, call_id=f"call_bench_{source.where}_{i}", effect_key=f"fx_bench_{source.where}_{i}", timeout_s=10
    )
    elapsed = (time.perf_counter() - t0) * 1000
    if not out.ok or out.content != f"hello {i}":
        raise RuntimeError(f"{source.where} call {i} failed: {out.content}")
    return elapsed


async def measure(url: str, calls: int) -> dict[str, list[float]]:
    redis = aredis.Redis.from_url(url)
    local = RegistrySource(load_tool_modules([TOOL_MODULE]))
    service = ServiceSource(redis)
    await service.refresh()
    times: dict[str, list[float]] = {"local": [], "service": []}
    try:
        for i in range(WARMUP + calls):
            for name, source in (("local", local), ("service", service)):
                ms = await one(source, i)
                if i >= WARMUP:
                    times[name].append(ms)
    finally:
        await redis.aclose()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    server = RedisServer()
    server.start()
    svc = None
    try:
        url = server.url + "/0"
        svc = ServiceProcess(url, (TOOL_MODULE,)).wait_ready()
        times = asyncio.run(measure(url, args.calls))
    finally:
        if svc is not None:
            svc.stop()
        server.stop()
    print(f"tool call round trip, {args.calls} calls each, one at a time (ms)")
    print(f"{'':>10} {'p50':>8} {'p99':>8} {'mean':>8}")
    for name, t in times.items():
        print(f"{name:>10} {pct(t, 50):8.3f} {pct(t, 99):8.3f} {sum(t) / len(t):8.3f}")
    d50 = pct(times["service"], 50) - pct(times["local"], 50)
    d99 = pct(times["service"], 99) - pct(times["local"], 99)
    r50 = pct(times["service"], 50) / pct(times["local"], 50)
    verdict = "meets" if d50 <= TARGET_MS else "MISSES"
    print(f"service - local: p50 {d50:+.3f} ms (x{r50:.1f}), p99 {d99:+.3f} ms")
    print(f"target: at most {TARGET_MS:g} ms over local at p50: {verdict}")


if __name__ == "__main__":
    main()
