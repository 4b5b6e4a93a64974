"""The worker loop's longest stall while hostile-schema jobs run, against plain jobs, in one run.

    .venv/bin/python bench/bench_hostile_schema.py [--jobs 4] [--tools 128]

A redis-server of its own and one worker in this process (worker.app.create_worker) over a
scripted engine: the grammar of each job is built for real (llama.cpp's converter through the
worker's GrammarBuilder, worker/grammar/budget.py), only the text is scripted. A probe task on the
worker's event loop sleeps 5 ms at a time and records by how much each sleep overran: that is the
loop's stall, which is what holds up heartbeats, leases and the other slots.

Plain phase: ``--jobs`` jobs with a small tool (``tool_choice`` required, so each builds a
grammar). Hostile phase: the same number of jobs whose tools the gateway admits but whose grammar
is large: one tool of 8 strings of ``minLength`` 1,000 (the protocol's default bounds, 43 KB of
grammar, built), and ``--tools`` such tools in one request (past the worker's default budget of
256 KiB: ends with grammar_too_large). Each hostile job has tools of its own names, so no grammar
comes from the cache. It prints each phase's longest stall, their ratio, and how each job ended.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from store.submission import Submission

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from store.jobstore import JobStore  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from toolq.wire.protocol import FunctionTool, JobRequest, Message  # noqa: E402
from worker.app import create_worker  # noqa: E402
from worker.scripted import ScriptedEngine  # noqa: E402
from worker.settings import WorkerSettings  # noqa: E402


def tool(name: str, properties: int, length: int) -> FunctionTool:
    props = {f"p{i}": {"type": "string", "minLength": length} for i in range(properties)}
    return FunctionTool.model_validate(
        {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}
    )


def request(tools: list[FunctionTool]) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="go")], tools=tools, tool_choice="required", max_tokens=64)


class StallProbe:
    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.worst_s = 0.0

    async def run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.worst_s = max(self.worst_s, time.perf_counter() - t - self.interval_s)


async def phase(store: JobStore, requests: list[JobRequest]) -> tuple[float, list[str]]:
    probe = StallProbe()
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(0.2)
    probe.worst_s = 0.0
    ids = [(await store.submit(Submission(r, model="scripted")))[0] for r in requests]
    endings = []
    for job_id in ids:
        async for ev in store.follow(job_id):
            if ev.terminal:
                endings.append(ev.data.get("code") or ev.type.value)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return probe.worst_s, endings


async def main(args: argparse.Namespace) -> None:
    server = RedisServer()
    server.start()
    try:
        # the text is the answer: what is measured is the grammar each round is built under
        engine = ScriptedEngine(["done"] * 1000, token_delay_s=0.001, slots=2)
        settings = WorkerSettings(redis_url=server.url, model_name="scripted", lease_ms=1500, heartbeat_ms=250)
        worker = create_worker(settings, engine, handle_signals=False)
        run = asyncio.create_task(worker.async_run())
        store = JobStore.from_url(server.url)
        await asyncio.sleep(1.0)
        plain = [request([tool("small", 1, 20)]) for _ in range(args.jobs)]
        hostile = []
        for i in range(args.jobs):
            if i % 2 == 0:
                hostile.append(request([tool(f"wide{i}", 8, 1000)]))
            else:
                hostile.append(request([tool(f"many{i}_{k}", 8, 1000) for k in range(args.tools)]))
        plain_stall, plain_endings = await phase(store, plain)
        hostile_stall, hostile_endings = await phase(store, hostile)
        print(f"plain jobs:   longest loop stall {plain_stall * 1000:.1f} ms; endings {plain_endings}")
        print(f"hostile jobs: longest loop stall {hostile_stall * 1000:.1f} ms; endings {hostile_endings}")
        print(f"ratio hostile / plain: {hostile_stall / max(plain_stall, 1e-4):.2f}")
        await store.close()
        await worker.close()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--tools", type=int, default=128)
    asyncio.run(main(parser.parse_args()))
