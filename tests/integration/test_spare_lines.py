"""Batch lines as spare capacity, through a real worker process (store/lua/dispatch.lua,
worker/load.py ``slot_freed``): a line takes only a free engine slot, never the worker's
interactive reserve, so an interactive job beside it is picked at once; and a line waiting for
a slot is taken the moment one frees, not at the worker's next poll."""

from __future__ import annotations

import asyncio
import os
import time

from store.jobstore import JobStore
from store.submission import Submission
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import EventType, JobRequest, JobStatus, Message

POLL_S = 5.0  # the worker's poll: a line left to it would wait this long
LONG = "x" * 48  # 12 tokens of 4 characters, 30 ms each: about 0.36 s of generation


def req(text: str) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content=text)], max_tokens=64)


async def ts(store: JobStore, job_id: str, kind: EventType) -> float:
    """When the job's event of that kind was written (seconds), waiting for it."""
    for _ in range(400):
        for ev in await store.events(job_id):
            if ev.type == kind:
                return ev.ts / 1000
        await asyncio.sleep(0.025)
    raise AssertionError(f"{job_id} has no {kind.value} event: {(await store.record(job_id)).status}")


async def test_a_line_leaves_the_reserve_to_interactive_work_and_takes_a_slot_the_moment_it_frees(redis_url):
    rules = write_rules([("line", LONG), (".*", "ok")], token_delay_s=0.03)
    env = {"TOOLQ_SLOTS": "1", "TOOLQ_INTERACTIVE_RESERVE": "1", "TOOLQ_POLL_DELAY_S": str(POLL_S)}
    worker = WorkerProcess(redis_url, script=rules, env=env).wait_ready()
    store = JobStore.from_url(redis_url, fair=True)
    try:
        first, _ = await store.submit(Submission(req("line 1"), model="scripted", tenant="a", spare=True))
        second, _ = await store.submit(Submission(req("line 2"), model="scripted", tenant="a", spare=True))
        await ts(store, first, EventType.started)
        await asyncio.sleep(0.1)
        assert (await store.record(second)).status == JobStatus.queued  # not taken into the reserve
        t0 = time.time()
        interactive, _ = await store.submit(Submission(req("hello"), model="scripted", tenant="b"))
        assert await ts(store, interactive, EventType.started) - t0 < 0.5  # into the reserve at once
        assert (await store.record(second)).status == JobStatus.queued
        # the slot frees as the first line and then the interactive job end (one slot); the line
        # waiting is taken then, woken by the worker itself, not POLL_S later
        freed = max(await ts(store, first, EventType.final), await ts(store, interactive, EventType.final))
        assert await ts(store, second, EventType.started) - freed < 0.5
        await ts(store, second, EventType.final)
    finally:
        await store.close()
        worker.stop()
        os.unlink(rules)
