"""Reads are bounded by what their caller asked for, not by what the thread or the fleet holds:
the ownership check reads one field of a job, the approvals list reads only the caller's tenant's
records, and a thread page reads only its page of messages. Bytes are Redis's own count of what
it sent (INFO stats ``total_net_output_bytes``), on a real redis-server."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from store import job_index, keys
from store.jobstore import JobStore
from store.submission import Submission
from store.threads import ThreadLimits, ThreadStore
from tests.support.pauses import paused_job, pending
from toolq.wire.protocol import JobRequest, Message

BIG = 256 * 1024  # bytes of conversation each record or message holds
BOUND = 8 * 1024  # what a bounded read may cost, whatever that is


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    await s.redis.flushdb()
    yield s
    await s.close()


async def sent_by(store: JobStore, read: Callable[[], Awaitable[Any]]) -> int:
    """The bytes Redis sent while ``read`` ran, less what reading the counter itself costs."""

    async def counter() -> int:
        return int((await store.redis.info("stats"))["total_net_output_bytes"])

    async def nothing() -> None:
        return None

    def between(fn: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[int]]:
        async def go() -> int:
            before = await counter()
            await fn()
            return await counter() - before

        return go

    return await between(read)() - await between(nothing)()


async def test_the_ownership_check_reads_one_field_not_the_record(store):
    job_id, _ = await store.submit(
        Submission(JobRequest(messages=[Message(role="user", content="x" * BIG)]), model="m", tenant="a")
    )
    assert await store.owner(job_id) == "a"
    assert await store.owner("job_missing") is None
    assert await sent_by(store, lambda: store.owner(job_id)) < BOUND
    assert await sent_by(store, lambda: store.record(job_id)) > BIG  # what the check read before


async def test_the_approvals_list_reads_only_the_callers_tenant(store):
    mine = await paused_job(store, pending("c1", "approval"), tenant="mine")
    others = [await paused_job(store, pending(f"o{i}", "approval"), tenant="other") for i in range(8)]
    for job_id in others:  # other tenants' paused jobs with long conversations
        await store.redis.hset(keys.job(job_id), "checkpoint", json.dumps({"messages": ["y" * BIG]}))
    listed = await job_index.paused(store.redis, "mine")
    assert [r.job_id for r in listed] == [mine]
    assert await sent_by(store, lambda: job_index.paused(store.redis, "mine")) < BOUND
    assert len(await job_index.paused(store.redis, None)) == 9  # an operator's view: every tenant
    assert await sent_by(store, lambda: job_index.paused(store.redis, None)) > 8 * BIG


async def test_a_thread_page_reads_only_its_page(store):
    threads = ThreadStore(store, limits=ThreadLimits(3600, 10, 100))
    t = await threads.create("a", messages=[Message(role="user", content=f"{i}" * BIG) for i in range(10)])
    ids = [i for i, _ in await threads.messages("a", t.id)]
    got, more = await threads.message_page("a", t.id, after=None, limit=1, order="desc")
    assert [i for i, _ in got] == ids[-1:] and more
    assert got[0][1].content == "9" * BIG
    got, more = await threads.message_page("a", t.id, after=ids[2], limit=3, order="asc")
    assert [i for i, _ in got] == ids[3:6] and more
    got, more = await threads.message_page("a", t.id, after=ids[1], limit=5, order="desc")
    assert [i for i, _ in got] == [ids[0]] and not more
    one = await sent_by(store, lambda: threads.message_page("a", t.id, after=None, limit=1, order="asc"))
    assert BIG < one < BIG + BOUND  # one message, not ten
    assert await sent_by(store, lambda: threads.messages("a", t.id)) > 10 * BIG
