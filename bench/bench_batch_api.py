"""The Batch API in the fleet's spare capacity (gateway/openai/batches/runner.py): a batch that
saturates the fleet beside tenant B's interactive jobs, on scripted workers (the queue's mechanics,
not the model's speed, are what a batch changes). One run prints, each against its anchor from the
same run:

- B's p95 queue wait (its ``queued`` event to its ``started`` event) beside the batch, against B's
  wait on the idle fleet. Target <= 1.25x.
- The batch's throughput (lines per second, from ``batches.create`` to the client seeing it
  ``completed``; the file was uploaded before) against the same lines sent at once as plain jobs
  to /v1/jobs (from the first job's creation to the last one's end). Target >= 0.95x.

Run: .venv/bin/python bench/bench_batch_api.py [--lines 400] [--b-jobs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import openai

from tests.support.gateways import GatewayProcess
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules

KEYS = {"ka": "a", "kb": "b"}
ANSWER = "a steady answer of some forty characters"


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def body(i: int) -> dict:
    return {"model": "scripted", "messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": 16}


def job(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": 16}


async def queue_wait(http: httpx.AsyncClient, job_id: str, key: str) -> float:
    """Seconds from the job's ``queued`` event to its ``started`` event (the events' own ts)."""
    ts: dict[str, float] = {}
    async with http.stream("GET", f"/v1/jobs/{job_id}/events", headers={"X-API-Key": key}) as resp:
        kind = None
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind in ("queued", "started", "final", "error"):
                ts.setdefault(kind, json.loads(line[5:])["ts"])
                if kind in ("final", "error"):
                    break
    return (ts["started"] - ts["queued"]) / 1000  # event ts are unix milliseconds


async def b_waits(http: httpx.AsyncClient, n: int, gap_s: float) -> list[float]:
    out = []
    for i in range(n):
        r = await http.post(
            "/v1/jobs", json={"messages": body(i)["messages"], "max_tokens": 16}, headers={"X-API-Key": "kb"}
        )
        r.raise_for_status()
        out.append(await queue_wait(http, r.json()["job_id"], "kb"))
        await asyncio.sleep(gap_s)
    return out


async def plain_jobs(http: httpx.AsyncClient, n: int) -> float:
    """Seconds for ``n`` jobs sent at once to /v1/jobs to all end: from the first job's creation
    to the last one's end, by the jobs' own times (this loop's polling of 400 jobs would add its
    own lag to the anchor)."""
    posts = [
        http.post("/v1/jobs", json={"messages": body(i)["messages"], "max_tokens": 16}, headers={"X-API-Key": "ka"})
        for i in range(n)
    ]
    ids = [r.json()["job_id"] for r in await asyncio.gather(*posts)]
    pending, views = set(ids), {}
    while pending:
        for job_id in list(pending):
            view = (await http.get(f"/v1/jobs/{job_id}", headers={"X-API-Key": "ka"})).json()
            if view["status"] in ("succeeded", "failed"):
                pending.discard(job_id)
                views[job_id] = view
        await asyncio.sleep(0.05)
    return (max(v["finished_ms"] for v in views.values()) - min(v["created_ms"] for v in views.values())) / 1000


def upload(c: openai.OpenAI, n: int) -> str:
    text = "\n".join(
        json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": body(i)})
        for i in range(n)
    )
    return c.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id


def create(c: openai.OpenAI, file_id: str) -> str:
    return c.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h").id


def wait_batch(c: openai.OpenAI, batch_id: str) -> float:
    t0 = time.monotonic()
    while c.batches.retrieve(batch_id).status != "completed":
        time.sleep(0.05)
    return time.monotonic() - t0


async def run(a: argparse.Namespace, url: str, rules: str) -> dict[str, float]:
    workers = [
        WorkerProcess(
            url, script=rules, env={"TOOLQ_SLOTS": str(a.slots), "TOOLQ_INTERACTIVE_RESERVE": str(a.reserve)}
        ).wait_ready()
        for _ in range(a.workers)
    ]
    env = {"TOOLQ_API_KEYS": ",".join(f"{k}:{t}" for k, t in KEYS.items()), "TOOLQ_FLEET_CACHE_S": "0.2"}
    gw = GatewayProcess(url, env=env).wait_ready()
    try:
        async with httpx.AsyncClient(base_url=gw.url, timeout=300) as http:
            c = openai.OpenAI(base_url=gw.url + "/v1", api_key="ka", max_retries=2, timeout=120)
            await b_waits(http, 3, 0.05)  # warm
            t0 = time.monotonic()
            quiet = await b_waits(http, a.b_jobs, a.b_gap_s)
            b_run_s = time.monotonic() - t0
            plain_s = await plain_jobs(http, a.lines)
            file_id = upload(c, a.lines)
            t0 = time.monotonic()  # created to completed: the anchor too starts once its jobs are sent
            alone = await asyncio.to_thread(wait_batch, c, create(c, file_id))
            alone_s = time.monotonic() - t0
            # long enough to outlast B's run twice over at the batch's own pace, so every B job
            # meets a saturated fleet; checked below
            beside = max(a.lines, math.ceil(a.lines / alone_s * (1.0 + b_run_s) * 2))
            beside_id = create(c, upload(c, beside))
            await asyncio.sleep(1.0)  # the batch fills the fleet first
            loaded = await b_waits(http, a.b_jobs, a.b_gap_s)
            still = (await asyncio.to_thread(c.batches.retrieve, beside_id)).status
            await asyncio.to_thread(c.batches.cancel, beside_id)
            if still != "in_progress":
                raise SystemExit(f"the batch beside B was {still!r} before B's last job: B did not meet a full fleet")
    finally:
        gw.stop()
        for w in workers:
            w.stop()
    return {
        "quiet_p95": pct(quiet, 0.95),
        "loaded_p95": pct(loaded, 0.95),
        "quiet_p50": pct(quiet, 0.5),
        "loaded_p50": pct(loaded, 0.5),
        "beside_lines": beside,
        "plain_s": plain_s,
        "batch_s": alone_s,
        "alone_wait_s": alone,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=400)
    p.add_argument("--b-jobs", type=int, default=100)
    p.add_argument("--b-gap-s", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument(
        "--reserve", type=int, default=1, help="each worker's TOOLQ_INTERACTIVE_RESERVE (0: the batches' headroom)"
    )
    p.add_argument("--token-delay-s", type=float, default=0.01)
    a = p.parse_args()
    server = RedisServer()
    server.start()
    rules = write_rules([(".*", ANSWER)], token_delay_s=a.token_delay_s)
    try:
        r = asyncio.run(run(a, server.url, rules))
    finally:
        server.stop()
        Path(rules).unlink(missing_ok=True)
    wait_ratio = r["loaded_p95"] / max(r["quiet_p95"], 1e-3)
    tput_ratio = r["plain_s"] / r["batch_s"]
    print(f"fleet: {a.workers} scripted workers x {a.slots} slots, interactive reserve {a.reserve}; {a.lines} lines")
    print(
        f"tenant B p95 queue wait: idle fleet {r['quiet_p95'] * 1000:.0f} ms, beside the batch "
        f"{r['loaded_p95'] * 1000:.0f} ms: ratio {wait_ratio:.2f}x (target <= 1.25x); p50 "
        f"{r['quiet_p50'] * 1000:.0f} and {r['loaded_p50'] * 1000:.0f} ms; {a.b_jobs} jobs each, "
        f"beside a batch of {r['beside_lines']} lines"
    )
    print(
        f"throughput: {a.lines} lines as a batch in {r['batch_s']:.2f} s, as plain jobs in {r['plain_s']:.2f} s: "
        f"ratio {tput_ratio:.2f}x (target >= 0.95x)"
    )
    return 0 if wait_ratio <= 1.25 and tput_ratio >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
