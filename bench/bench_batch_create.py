"""What a batch's creation costs the gateway's other requests: ``/healthz`` latency, probed every
10 ms, while ``POST /v1/batches`` reads a large input file (gateway/openai/batches/lines.py, in the
gateway's batch files' process: gateway/check_process.py), against the same probe on the idle
gateway in the same run. The file's lines each carry a ``response_format`` JSON schema (checked
like a request's) unless ``--plain``.

Run: .venv/bin/python bench/bench_batch_create.py [--lines 5000] [--plain]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from tests.support.gateways import GatewayProcess
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules


def body(i: int, plain: bool) -> dict:
    b: dict = {"model": "scripted", "messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": 16}
    if not plain:
        props = {f"p{k}": {"type": "object", "properties": {"a": {"type": "string"}}} for k in range(30)}
        b["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object", "properties": props}},
        }
    return b


async def probe(http: httpx.AsyncClient, stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        (await http.get("/healthz")).raise_for_status()
        out.append(time.perf_counter() - t)
        await asyncio.sleep(0.01)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run(a: argparse.Namespace, url: str) -> tuple[list[float], list[float], float, int]:
    worker = WorkerProcess(url, script=write_rules([(".*", "ok")])).wait_ready()
    gw = GatewayProcess(url, env={"TOOLQ_API_KEYS": "ka:a"}).wait_ready()
    try:
        async with httpx.AsyncClient(base_url=gw.url, timeout=600, headers={"Authorization": "Bearer ka"}) as http:
            url = "/v1/chat/completions"
            text = "\n".join(
                json.dumps({"custom_id": f"l{i}", "method": "POST", "url": url, "body": body(i, a.plain)})
                for i in range(a.lines)
            )
            up = await http.post(
                "/v1/files", files={"file": ("in.jsonl", io.BytesIO(text.encode()))}, data={"purpose": "batch"}
            )
            up.raise_for_status()
            create = {"input_file_id": up.json()["id"], "endpoint": url, "completion_window": "24h"}
            idle: list[float] = []
            stop = asyncio.Event()
            task = asyncio.create_task(probe(http, stop, idle))
            await asyncio.sleep(a.idle_s)
            stop.set()
            await task
            during: list[float] = []
            stop = asyncio.Event()
            task = asyncio.create_task(probe(http, stop, during))
            t0 = time.perf_counter()
            made = await http.post("/v1/batches", json=create)
            took = time.perf_counter() - t0
            stop.set()
            await task
            made.raise_for_status()
            return idle, during, took, len(text)
    finally:
        gw.stop()
        worker.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=5000)
    p.add_argument("--plain", action="store_true", help="lines without a response_format schema")
    p.add_argument("--idle-s", type=float, default=2.0)
    a = p.parse_args()
    server = RedisServer()
    server.start()
    try:
        idle, during, took, size = asyncio.run(run(a, server.url))
    finally:
        server.stop()
    print(f"batches.create of {a.lines} lines ({size / 1e6:.1f} MB) took {took:.2f} s")
    for name, xs in (("idle gateway", idle), ("during the create", during)):
        print(
            f"/healthz {name}: {len(xs)} probes, p50 {pct(xs, 0.5) * 1000:.1f} ms, "
            f"p99 {pct(xs, 0.99) * 1000:.1f} ms, max {max(xs) * 1000:.1f} ms"
        )
    print(f"/healthz p99 during the create / idle: {pct(during, 0.99) / pct(idle, 0.99):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
