"""The event hub against a real Redis: many followers on one pub/sub connection, each exact (seq
1, 2, 3 … without gaps or repeats, one terminal event), a slow follower that blocks nobody and
catches up from the stream, and a follower the log was trimmed past told so."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from store import keys
from store.event_hub import EventHub
from store.jobstore import JobStore
from store.submission import Submission
from tests.integration.gateway_support import private_redis
from tests.support.redis_server import RedisServer
from toolq.errors import EventsGone
from toolq.wire.protocol import Event, EventType, JobRequest, JobResult, JobStatus, Message


def _request() -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="hi")])


@pytest.fixture(scope="module")
def redis_url():
    # a server of the module's own: its pub/sub counts and databases are this module's alone
    with private_redis() as url:
        yield url


@pytest.fixture
async def hub(redis_url):
    store = JobStore.from_url(redis_url)
    h = EventHub(store, queue_size=4, page=10)
    h.start()
    await asyncio.wait_for(h.connected.wait(), 5)
    yield h
    await h.stop()
    await store.close()


async def _emit(store: JobStore, job_id: str, n: int, *, final: bool = True, pause_s: float = 0.0) -> None:
    for i in range(n):
        await store.emit(job_id, EventType.token, {"text": str(i)})
        if pause_s:
            await asyncio.sleep(pause_s)
    if final:
        res = JobResult(job_id=job_id, status=JobStatus.succeeded, finish_reason="stop")
        await store.emit(job_id, EventType.final, {}, result=res)


def _exact(events: list[Event], after: int, last: int) -> None:
    assert [e.seq for e in events] == list(range(after + 1, last + 1))
    assert sum(e.terminal for e in events) == 1 and events[-1].terminal


async def test_followers_of_many_jobs_get_every_event_once_over_one_connection(hub, redis_url):
    store = hub.store
    jobs = [(await store.submit(Submission(_request(), model="m")))[0] for _ in range(5)]
    starts = [0, 1, 0, 1, 0]  # seq 1 is the queued event: some start after it
    followers = [hub.follow(job, after, idle_s=5) for job in jobs for after in starts]
    results = [asyncio.create_task(_collect(f)) for f in followers]
    await _until(lambda: hub.following == len(followers))
    r = aioredis.Redis.from_url(redis_url)
    channels = [keys.events_channel(j) for j in jobs]
    # one subscriber per job channel: the hub's one connection, whatever the followers' count
    assert [n for _, n in await r.pubsub_numsub(*channels)] == [1] * len(jobs)
    await asyncio.gather(*(_emit(store, j, 30, pause_s=0.001) for j in jobs))
    got = await asyncio.wait_for(asyncio.gather(*results), 10)
    for events, after in zip(got, [a for _ in jobs for a in starts], strict=True):
        _exact(events, after, 32)  # queued, 30 tokens, final
    # the last follower of each job gave its channel back
    await _until(lambda: hub.following == 0)
    await _until_async(lambda: _numsub(r, channels), lambda v: v == [0] * len(jobs))
    await r.aclose()


async def test_a_slow_follower_blocks_no_one_and_catches_up_from_the_stream(hub):
    store = hub.store
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    fast = asyncio.create_task(_collect(hub.follow(job_id, idle_s=5)))
    slow = hub.follow(job_id, idle_s=5)
    first = await slow.__anext__()  # joined and replayed; now it reads nothing for a while
    assert first.seq == 1
    await _until(lambda: hub.following == 2)
    await _emit(store, job_id, 40)  # ten times its queue
    fast_events = await asyncio.wait_for(fast, 5)  # done while the slow one still sleeps
    _exact(fast_events, 0, 42)
    rest = await asyncio.wait_for(_collect(slow), 5)
    _exact([first, *rest], 0, 42)


async def test_a_follower_the_log_was_trimmed_past_is_told_which_events(hub):
    store = hub.store
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    await _emit(store, job_id, 20, final=False)  # seqs 1..21
    await store.redis.xtrim(keys.log(job_id), minid="8-0", approximate=False)  # as MAXLEN would, keeping 8..21
    with pytest.raises(EventsGone, match=r"events 4\.\.7 of job"):
        await _collect(hub.follow(job_id, after=3, idle_s=5))
    assert await hub.first_seq(job_id) == 8
    # from the first event kept on, it follows as ever
    follower = asyncio.create_task(_collect(hub.follow(job_id, after=7, idle_s=5)))
    await _until(lambda: hub.following == 1)
    await _emit(store, job_id, 2)
    _exact(await asyncio.wait_for(follower, 5), 7, 24)


async def test_a_follower_the_trim_overtakes_while_it_lags_is_told_mid_stream(hub):
    store = hub.store
    job_id, _ = await store.submit(Submission(_request(), model="m"))
    lagging = hub.follow(job_id, idle_s=5)
    assert (await lagging.__anext__()).seq == 1
    await _emit(store, job_id, 30, final=False)  # seqs 2..31, past its queue of 4
    await store.redis.xtrim(keys.log(job_id), minid="20-0", approximate=False)
    with pytest.raises(EventsGone, match=r"events 2\.\.19 of job"):
        await _collect(lagging)


async def test_a_follower_loses_nothing_across_a_redis_restart():
    server = RedisServer(appendfsync="always")  # its data outlives the restart
    server.start()
    store = JobStore.from_url(server.url + "/0")
    h = EventHub(store, queue_size=4, page=10)
    h.start()
    try:
        await asyncio.wait_for(h.connected.wait(), 5)
        job_id, _ = await store.submit(Submission(_request(), model="m"))
        await _emit(store, job_id, 3, final=False)  # seqs 1..4
        follower = asyncio.create_task(_collect(h.follow(job_id, idle_s=1)))
        await _until(lambda: h.following == 1)
        server.stop()
        await asyncio.sleep(0.5)
        server.start()
        # written at once, while the hub may still be reconnecting: pub/sub may never carry them
        await _emit(store, job_id, 5)
        _exact(await asyncio.wait_for(follower, 30), 0, 10)
    finally:
        await h.stop()
        await store.close()
        server.remove()


async def _collect(it) -> list[Event]:
    return [e async for e in it if e is not None]


async def _numsub(r, channels: list[str]) -> list[int]:
    return [n for _, n in await r.pubsub_numsub(*channels)]


async def _until(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _until_async(get, ok, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not ok(value := await get()):
        assert asyncio.get_running_loop().time() < deadline, f"condition not met in time: {value}"
        await asyncio.sleep(0.01)
