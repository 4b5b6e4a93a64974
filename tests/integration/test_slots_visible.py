"""A worker's slots and tool-call format reach the fleet entry, /v1/models and the gateway's /metrics; the scripted engine
runs one generation per slot at once, so several jobs run side by side on one worker."""

from __future__ import annotations

import asyncio
import os
import time

import redis

from gateway.settings import GatewaySettings
from store import keys
from store.fleet import WorkerInfo
from store.jobstore import JobStore
from store.submission import Submission
from tests.integration.gateway_support import asgi_client, wait_for
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import EventType, JobRequest, Message


def test_the_fleet_entry_shows_slots_and_engine_rates(redis_url):
    env = {"TOOLQ_WORKER_NICE": "3"}
    w = WorkerProcess(redis_url, script=write_rules([("", "ok")]), extra=("--slots", "3"), env=env).wait_ready()
    try:
        # TOOLQ_WORKER_NICE lowers the worker's CPU priority below the processes beside it
        assert os.getpriority(os.PRIO_PROCESS, w.proc.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)
        r = redis.Redis.from_url(redis_url)
        info = WorkerInfo.from_hash(r.hgetall(keys.worker(w.worker_id)))
        assert info is not None and info.slots == 3 and info.max_jobs == 3 and info.slots_busy == 0
        assert (info.format, info.template) == ("hermes", "hermes3_tool_calling.j2")
    finally:
        w.stop()


async def test_models_and_metrics_show_the_slots(redis_url):
    w = WorkerProcess(redis_url, script=write_rules([("", "ok")]), extra=("--slots", "3")).wait_ready()
    try:
        async with asgi_client(GatewaySettings(redis_url=redis_url)) as c:
            models = (await c.get("/v1/models")).json()["data"]
            assert [(m["id"], m["slots"], m["slots_busy"], m["format"]) for m in models] == [
                ("scripted", 3, 0, "hermes")
            ]
            text = (await c.get("/metrics")).text
            assert 'toolq_slots{model="scripted"} 3.0' in text
            assert 'toolq_tool_format{format="hermes",model="scripted"} 1.0' in text
            for name in (
                "toolq_slots_busy",
                "toolq_batch_size",
                "toolq_prefill_tokens_per_second",
                "toolq_decode_tokens_per_second",
            ):
                assert f'{name}{{model="scripted"}}' in text
    finally:
        w.stop()


async def test_jobs_run_side_by_side_on_one_worker(redis_url):
    # Each reply takes ~0.6 s to emit; four at once on four slots take about as long as one.
    w = WorkerProcess(
        redis_url, script=write_rules([("", "slow answer " * 25)], token_delay_s=0.008), extra=("--slots", "4")
    ).wait_ready()
    store = JobStore.from_url(redis_url)
    try:
        request = JobRequest(messages=[Message(role="user", content="go")], tool_choice="none", max_tokens=500)

        async def one() -> float:
            job_id, _ = await store.submit(Submission(request, model="scripted"))
            t0 = time.perf_counter()
            async for ev in store.follow(job_id):
                if ev.terminal:
                    assert ev.type == EventType.final
            return time.perf_counter() - t0

        alone = await one()
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(4)))
        together = time.perf_counter() - t0
        assert together < 2.5 * alone, (together, alone)
        # the rates in the fleet entry saw the work
        r = redis.Redis.from_url(redis_url)
        await wait_for(lambda: WorkerInfo.from_hash(r.hgetall(keys.worker(w.worker_id))).jobs_done >= 5)
    finally:
        await store.close()
        w.stop()
