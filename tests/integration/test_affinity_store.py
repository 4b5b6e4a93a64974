"""Affinity in the store, on a real Redis (store/affinity.py, lua/dispatch.lua, the pickup in
lua/arq_start.lua):
a job offered to a worker is taken by that worker, left alone by the others while it is live,
has a free slot and its wait runs, and taken by anyone at once when it is gone or full or once
the wait has passed; the fair share between tenants holds around it; the gateway's matching finds
the worker holding the longest prefix of a request's messages."""

from __future__ import annotations

import asyncio
import time

import redis as sync_redis

from store import affinity, arq_link, keys
from store.conversation_keys import prefix_keys, request_keys, transcript_keys
from store.fair import FairQueue
from store.jobstore import JobStore
from store.scripts import Script
from store.submission import Submission
from tests.integration.gateway_support import register_fake_worker
from toolq.wire.protocol import FunctionCall, JobRequest, Message, ToolCall

MODEL = "m"


def req(text: str = "go", **kw) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content=text)], tools=[], **kw)


async def setup(redis_url: str, wait_ms: int, *workers: str) -> tuple[JobStore, FairQueue]:
    for w in workers:
        register_fake_worker(redis_url, MODEL, [], worker_id=w)
    store = JobStore.from_url(redis_url, fair=True, affinity_wait_ms=wait_ms)
    for w in workers:
        await affinity.report_load(store.redis, MODEL, w, 0, 1)
    return store, FairQueue(store.redis)


async def pickup(store: JobStore, worker: str, arq_ids: list[str]) -> list[str]:
    """What the worker's look at arq's queue takes of ``arq_ids`` (store/lua/arq_start.lua)."""
    taken = await Script(store.redis, "arq_start")(
        queue=keys.queue(MODEL),
        reserved=keys.affinity_reserved(MODEL),
        progress_prefix="test-progress:",
        mark_ms=60_000,
        now_ms=int(time.time() * 1000) + 1000,
        arq_ids="\n".join(arq_ids),
        limit=len(arq_ids),
        asking=worker,
    )
    return [t.decode() for t in taken[::2]]


def test_a_job_offered_to_a_worker_waits_for_it_then_falls_back(redis_url):
    async def go():
        store, fair = await setup(redis_url, 400, "wa", "wb")
        job, _ = await store.submit(Submission(req(), model=MODEL, prefer="wa"))
        rec = await store.record(job)
        assert rec.prefer == "wa" and rec.prefer_until_ms
        # its worker is woken on its own list
        assert await store.redis.lrange(keys.worker_wake(MODEL, "wa"), 0, -1)
        other = await fair.dispatch_for(MODEL, 1, worker="wb")
        assert other.chosen == [] and other.held_until_ms == rec.prefer_until_ms
        await asyncio.sleep(0.45)
        late = await fair.dispatch_for(MODEL, 1, worker="wb")
        assert [(d.job_id, d.placed) for d in late.chosen] == [(job, "fallback_wait")]
        assert (await store.record(job)).placed == "fallback_wait"
        assert (await affinity.placements(store.redis, MODEL))["fallback_wait"] == 1
        await store.close()

    asyncio.run(go())


def test_the_preferred_worker_takes_it_and_it_is_reserved_for_it_on_the_queue(redis_url):
    async def go():
        store, fair = await setup(redis_url, 5000, "wa", "wb")
        job, _ = await store.submit(Submission(req(), model=MODEL, prefer="wa"))
        mine = await fair.dispatch_for(MODEL, 1, worker="wa")
        assert [(d.job_id, d.placed) for d in mine.chosen] == [(job, "affinity")]
        arq_id = f"{job}:1"
        await store.redis.zadd(keys.queue(MODEL), {"job_x:1": 0})  # a job no one reserved, ahead of it
        both = ["job_x:1", arq_id]
        assert await pickup(store, "wb", both) == ["job_x:1"]  # another worker leaves the reserved job
        assert await pickup(store, "wa", both) == [arq_id]  # its own worker takes it (job_x is in progress)
        assert not await store.redis.exists(keys.affinity_reserved(MODEL))  # taken: off the list
        await store.close()

    asyncio.run(go())


def test_a_worker_that_dispatches_takes_its_jobs_in_the_same_step(redis_url):
    async def go():
        store, fair = await setup(redis_url, 5000, "wa", "wb")
        mine, _ = await store.submit(Submission(req(), model=MODEL, prefer="wa"))
        plain, _ = await store.submit(Submission(req("other"), model=MODEL))
        got = await fair.dispatch_for(MODEL, 2, worker="wa", take_ms=60_000)
        assert sorted((d.job_id, d.placed, d.taken) for d in got.chosen) == sorted(
            [(mine, "affinity", True), (plain, "", True)]
        )
        arq_ids = [f"{mine}:1", f"{plain}:1"]
        for arq_id in arq_ids:
            # on arq's queue, as every job in progress is, under arq's own in-progress mark
            assert await store.redis.zscore(keys.queue(MODEL), arq_id) == got.score
            assert 59_000 < await store.redis.pttl(arq_link.IN_PROGRESS_KEY_PREFIX + arq_id) <= 60_000
        # so another worker's look at the queue leaves them, and none needs a reservation
        taken = await arq_link.JobTaker(store.redis).take(
            keys.queue(MODEL),
            [a.encode() for a in arq_ids],
            limit=2,
            asking="wb",
            reserved=keys.affinity_reserved(MODEL),
            mark_ms=60_000,
            now_ms=int(time.time() * 1000) + 1000,
        )
        assert taken == []
        assert not await store.redis.exists(keys.affinity_reserved(MODEL))
        # without take_ms the job only joins the queue: no mark
        later, _ = await store.submit(Submission(req("later"), model=MODEL))
        [d] = (await fair.dispatch_for(MODEL, 1, worker="wb")).chosen
        assert (d.job_id, d.taken) == (later, False)
        assert not await store.redis.exists(arq_link.IN_PROGRESS_KEY_PREFIX + f"{later}:1")
        await store.close()

    asyncio.run(go())


def test_an_offer_leaves_one_wake_token_whoever_takes_the_job(redis_url):
    async def go():
        store, fair = await setup(redis_url, 5000, "wa", "wb")
        own = keys.worker_wake(MODEL, "wa")
        held, _ = await store.submit(Submission(req(), model=MODEL, prefer="wa"))
        assert await store.redis.llen(own) == 1  # the offer's token
        assert (await fair.dispatch_for(MODEL, 1, worker="wb")).chosen == []
        assert await store.redis.llen(own) == 1  # left to wa, whose list holds a token: not a second
        await store.redis.delete(own)  # wa read it for a look that took something else
        assert (await fair.dispatch_for(MODEL, 1, worker="wb")).chosen == []
        assert await store.redis.llen(own) == 1  # woken again for the job left to it
        await store.redis.delete(own)
        # a job offered to a worker that is gone is taken by another: the offer's token goes with it
        gone, _ = await store.submit(Submission(req("x"), model=MODEL, prefer="wz"))
        wz = keys.worker_wake(MODEL, "wz")
        assert await store.redis.llen(wz) == 1
        got = await fair.dispatch_for(MODEL, 2, worker="wb", take_ms=60_000)
        assert [(d.job_id, d.placed) for d in got.chosen] == [(gone, "fallback_gone")]
        assert await store.redis.llen(wz) == 0
        assert held not in [d.job_id for d in got.chosen]
        await store.close()

    asyncio.run(go())


def test_a_reservation_lapses_so_a_dead_workers_job_is_taken_by_another(redis_url):
    async def go():
        store, fair = await setup(redis_url, 5000, "wa", "wb")
        job, _ = await store.submit(Submission(req(), model=MODEL, prefer="wa"))
        await fair.dispatch_for(MODEL, 1, worker="wa")
        arq_id = f"{job}:1"
        # wa died before its look at the queue: once the reservation's time has passed, anyone takes it
        await store.redis.hset(keys.affinity_reserved(MODEL), arq_id, f"wa {int(time.time() * 1000) - 1}")
        assert await pickup(store, "wb", [arq_id]) == [arq_id]
        assert not await store.redis.hexists(keys.affinity_reserved(MODEL), arq_id)
        await store.close()

    asyncio.run(go())


def test_a_gone_or_full_worker_gives_its_jobs_up_at_once(redis_url):
    async def go():
        store, fair = await setup(redis_url, 60_000, "wa", "wb")
        gone, _ = await store.submit(Submission(req(), model=MODEL, prefer="wz"))  # no registry entry
        got = await fair.dispatch_for(MODEL, 1, worker="wb")
        assert [(d.job_id, d.placed) for d in got.chosen] == [(gone, "fallback_gone")]
        await affinity.report_load(store.redis, MODEL, "wa", 1, 1)
        full, _ = await store.submit(Submission(req(), model=MODEL, prefer="wa"))
        got = await fair.dispatch_for(MODEL, 1, worker="wb")
        assert [(d.job_id, d.placed) for d in got.chosen] == [(full, "fallback_full")]
        assert await affinity.placements(store.redis, MODEL) == {
            "affinity": 0,
            "fallback_wait": 0,
            "fallback_gone": 1,
            "fallback_full": 1,
        }
        await store.close()

    asyncio.run(go())


def test_a_full_workers_job_goes_after_the_asking_workers_own(redis_url):
    """Both workers busy with many follow-ups: a worker with a free slot runs its own conversation
    before one whose worker is full (which would evaluate its whole prompt again here)."""

    async def go():
        store, fair = await setup(redis_url, 60_000, "wa", "wb")
        await affinity.report_load(store.redis, MODEL, "wa", 1, 1)
        theirs, _ = await store.submit(Submission(req("a"), model=MODEL, prefer="wa"))
        mine, _ = await store.submit(Submission(req("b"), model=MODEL, prefer="wb"))
        got = await fair.dispatch_for(MODEL, 1, worker="wb")
        assert [(d.job_id, d.placed) for d in got.chosen] == [(mine, "affinity")]
        got = await fair.dispatch_for(MODEL, 1, worker="wb")  # nothing else to take: at once
        assert [(d.job_id, d.placed) for d in got.chosen] == [(theirs, "fallback_full")]
        await store.close()

    asyncio.run(go())


def test_a_held_job_passes_the_turn_to_its_tenants_next_job_and_the_shares_hold(redis_url):
    async def go():
        store, fair = await setup(redis_url, 60_000, "wa", "wb")
        held, _ = await store.submit(Submission(req(), model=MODEL, tenant="t1", prefer="wa"))
        free1, _ = await store.submit(Submission(req(), model=MODEL, tenant="t1"))
        other, _ = await store.submit(Submission(req(), model=MODEL, tenant="t2"))
        free2, _ = await store.submit(Submission(req(), model=MODEL, tenant="t1"))
        # wb: t1's turn goes to its next job (not the one left to wa), then t2's turn, then t1's
        got = await fair.dispatch_for(MODEL, 3, worker="wb")
        assert [d.job_id for d in got.chosen] == [free1, other, free2]
        # wa takes its job; t1 keeps the job's place meanwhile
        got = await fair.dispatch_for(MODEL, 1, worker="wa")
        assert [(d.job_id, d.placed) for d in got.chosen] == [(held, "affinity")]
        started = await fair.started()
        assert started == {"t1": 3, "t2": 1}
        await store.close()

    asyncio.run(go())


def test_a_tenant_whose_jobs_all_wait_for_their_worker_does_not_block_the_others(redis_url):
    async def go():
        store, fair = await setup(redis_url, 60_000, "wa", "wb")
        await store.submit(Submission(req(), model=MODEL, tenant="t1", prefer="wa"))
        other, _ = await store.submit(Submission(req(), model=MODEL, tenant="t2"))
        got = await fair.dispatch_for(MODEL, 2, worker="wb")
        assert [d.job_id for d in got.chosen] == [other]
        await store.close()

    asyncio.run(go())


def test_a_resumed_pause_is_offered_to_the_worker_that_ran_it(redis_url):
    async def go():
        store, fair = await setup(redis_url, 60_000, "wa", "wb")
        job, _ = await store.submit(Submission(req(), model=MODEL))
        got = await fair.dispatch_for(MODEL, 1, worker="wa")
        assert [d.job_id for d in got.chosen] == [job]
        from toolq.wire.payloads import StartedData
        from toolq.wire.protocol import PendingAction

        data = StartedData(attempt=1, worker="wa", model=MODEL).to_wire()
        await store.start(job, attempt=1, fresh=data, resumed=data, lease_ms=60_000, worker="wa")
        pending = [PendingAction(id="c1", name="f", arguments={}, kind="client", where="client")]
        await store.pause(job, attempt=1, pending=pending, deadline_ms=int(time.time() * 1000) + 60_000, checkpoint={})
        assert await store.answer_actions(job, [("c1", {"output": "ok"})], "client")
        rec = await store.record(job)
        assert (rec.worker, rec.prefer, rec.attempt) == ("wa", "wa", 2)
        assert (await fair.dispatch_for(MODEL, 1, worker="wb")).chosen == []
        got = await fair.dispatch_for(MODEL, 1, worker="wa")
        assert [(d.job_id, d.attempt, d.placed) for d in got.chosen] == [(job, 2, "affinity")]
        await store.close()

    asyncio.run(go())


def test_the_worker_holding_the_longest_prefix_is_preferred(redis_url):
    async def go():
        r = sync_redis.Redis.from_url(redis_url)
        first = [Message(role="system", content="be brief"), Message(role="user", content="weather?")]
        call = ToolCall(id="call_1", function=FunctionCall(name="lookup", arguments='{"q": "x"}'))
        answered = [*first, Message(role="assistant", tool_calls=[call])]
        request = JobRequest(messages=first, tools=[])
        store, _ = await setup(redis_url, 300, "wa", "wb")
        # wa ran the first turn (up to its call); wb only ever saw the opening system message
        await affinity.publish_held(store.redis, "wa", transcript_keys(MODEL, request, answered), 10_000)
        await affinity.publish_held(store.redis, "wb", prefix_keys(MODEL, [], first[:1]), 10_000)
        # the caller sends it back respelled: a new call id, other JSON spacing, a tool message
        # with the result
        respelled = ToolCall(id="call_zz", function=FunctionCall(name="lookup", arguments='{ "q":"x" }'))
        follow = JobRequest(
            messages=[
                *first,
                Message(role="assistant", content="", tool_calls=[respelled]),
                Message(role="tool", tool_call_id="call_zz", content="sunny"),
            ],
            tools=[],
        )
        assert await affinity.preferred_worker(store.redis, ["wb", "wa"], request_keys(MODEL, follow)) == "wa"
        other_model = request_keys("another", follow)
        assert await affinity.preferred_worker(store.redis, ["wb", "wa"], other_model) is None
        assert r.ttl(keys.held("wa")) > 0
        # both hold the opening: either may get a new conversation that starts with it, not always the first
        await affinity.publish_held(store.redis, "wb", transcript_keys(MODEL, request, answered), 10_000)
        again = request_keys(MODEL, follow)
        picks = {await affinity.preferred_worker(store.redis, ["wa", "wb"], again) for _ in range(40)}
        assert picks == {"wa", "wb"}
        await store.close()

    asyncio.run(go())
