"""Answers to a paused job against a real Redis (store/lua/answer.lua through JobStore.answer_actions),
cancel of a paused job, and the action deadline (store/pauses.py). Every refusal leaves the record,
the stream and the queue exactly as they were."""

from __future__ import annotations

import asyncio

import pytest

from store import arq_link, keys, pauses
from store.jobstore import JobNotFound, JobStore
from store.submission import Submission
from tests.support.pauses import paused_job, pending
from toolq import errors
from toolq.wire.protocol import ErrorCode, EventType, JobRequest, JobStatus, Message, now_ms


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    yield s
    await s.close()


async def snapshot(store: JobStore, job_id: str) -> tuple:
    r = store.redis
    return (
        await r.hgetall(keys.job(job_id)),
        await r.xlen(keys.log(job_id)),
        await r.zrange(keys.queue("m"), 0, -1),
        await r.zscore(keys.PAUSED, job_id),
    )


async def test_partial_then_complete_answers_resume_the_job(store):
    job_id = await paused_job(store, pending("c1", "client"), pending("c2", "client"))
    assert await store.redis.zscore(keys.PAUSED, job_id) is not None
    view = (await store.record(job_id)).view()
    assert view.status == JobStatus.requires_action
    assert [c.id for c in view.required_action.calls] == ["c1", "c2"]

    resumed = await store.answer_actions(job_id, [("c1", {"content": "one", "is_error": False})], "client")
    assert resumed is False
    rec = await store.record(job_id)
    assert rec.status == "requires_action" and rec.attempt == 1
    assert rec.actions["c1"]["answer"] == {"content": "one", "is_error": False}
    assert [c.id for c in rec.view().required_action.calls] == ["c2"]

    assert await store.answer_actions(job_id, [("c2", {"content": "two", "is_error": True})], "client") is True
    rec = await store.record(job_id)
    assert rec.status == "queued" and rec.attempt == 2
    assert rec.view().required_action is None
    assert await store.redis.zscore(keys.PAUSED, job_id) is None
    last = (await store.events(job_id))[-1]
    assert last.type == EventType.queued and last.data == {"attempt": 2, "resumed": "requires_action"}
    assert arq_link.arq_job_id(job_id, 2).encode() in await store.redis.zrange(keys.queue("m"), 0, -1)
    assert job_id.encode() in await store.redis.lrange(keys.wake("m"), 0, -1)
    answers = {c: a["answer"] for c, a in rec.actions.items()}
    assert answers == {"c1": {"content": "one", "is_error": False}, "c2": {"content": "two", "is_error": True}}


@pytest.mark.parametrize(
    ("answers", "kind", "error", "names"),
    [
        ([("nope", {"content": "x"})], "client", errors.UnknownToolCall, "'nope'"),
        ([("c1", {"approved": True, "reason": None})], "approval", errors.WrongActionKind, "'c1'"),
        ([("a1", {"content": "x"})], "client", errors.WrongActionKind, "/approvals"),
        ([("c1", {"content": "x"}), ("c1", {"content": "y"})], "client", errors.InvalidRequest, "twice"),
        ([("c1", {"content": "x"}), ("zz", {"content": "y"})], "client", errors.UnknownToolCall, "'zz'"),
    ],
)
async def test_a_refused_answer_changes_nothing(store, answers, kind, error, names):
    job_id = await paused_job(store, pending("c1", "client"), pending("a1", "approval"))
    before = await snapshot(store, job_id)
    with pytest.raises(error) as e:
        await store.answer_actions(job_id, answers, kind)
    assert names in e.value.message and 400 <= e.value.status < 500
    assert await snapshot(store, job_id) == before


async def test_an_answer_is_taken_once(store):
    job_id = await paused_job(store, pending("c1", "client"), pending("c2", "client"))
    await store.answer_actions(job_id, [("c1", {"content": "x"})], "client")
    before = await snapshot(store, job_id)
    with pytest.raises(errors.AlreadyAnswered, match="'c1'"):
        await store.answer_actions(job_id, [("c1", {"content": "again"})], "client")
    with pytest.raises(errors.AlreadyAnswered):  # all or nothing: c2 is not recorded either
        await store.answer_actions(job_id, [("c2", {"content": "y"}), ("c1", {"content": "again"})], "client")
    assert await snapshot(store, job_id) == before


async def test_concurrent_posts_of_one_call_record_one_answer(store):
    job_id = await paused_job(store, pending("c1", "client"), pending("c2", "client"))

    async def post(text: str):
        try:
            return await store.answer_actions(job_id, [("c1", {"content": text})], "client")
        except errors.AlreadyAnswered as e:
            return e

    outcomes = await asyncio.gather(*[post(str(i)) for i in range(10)])
    assert outcomes.count(False) == 1
    assert sum(isinstance(o, errors.AlreadyAnswered) for o in outcomes) == 9


async def test_an_answer_writes_only_itself(store):
    """Each answer is a field of its own: a partial answer leaves the calls as the pause wrote
    them, however large, and what it writes is its own answer and the count."""
    calls = [pending(f"c{i}", "client") for i in range(50)]
    calls = [c.model_copy(update={"arguments": {"q": "x" * 2_000}}) for c in calls]
    job_id = await paused_job(store, *calls)
    written = await store.redis.hget(keys.job(job_id), "actions")
    await store.answer_actions(job_id, [("c7", {"content": "seven"})], "client")
    h = await store.redis.hgetall(keys.job(job_id))
    assert h[b"actions"] == written  # not written again
    assert (h[b"answer:c7"], h[b"answered"]) == (b'{"content": "seven"}', b"1")
    assert (await store.record(job_id)).actions["c7"]["answer"] == {"content": "seven"}


async def test_concurrent_posts_of_different_calls_resume_the_job_once(store):
    job_id = await paused_job(store, *[pending(f"c{i}", "client") for i in range(8)])
    outcomes = await asyncio.gather(
        *[store.answer_actions(job_id, [(f"c{i}", {"content": str(i)})], "client") for i in range(8)]
    )
    assert outcomes.count(True) == 1 and outcomes.count(False) == 7  # whichever came last resumed it
    rec = await store.record(job_id)
    assert (rec.status, rec.attempt, rec.answered) == (JobStatus.queued, 2, 8)
    assert {c: a["answer"]["content"] for c, a in rec.actions.items()} == {f"c{i}": str(i) for i in range(8)}


async def test_a_new_pause_clears_the_last_pauses_answers(store):
    job_id = await paused_job(store, pending("c1", "client"))
    assert await store.answer_actions(job_id, [("c1", {"content": "one"})], "client") is True
    await store.emit(job_id, EventType.started, {}, attempt=2, status=JobStatus.running, lease_ms=10_000)
    await store.pause(
        job_id, attempt=2, pending=[pending("c2", "client")], deadline_ms=now_ms() + 60_000, checkpoint={}
    )
    h = await store.redis.hgetall(keys.job(job_id))
    assert b"answer:c1" not in h and b"answered" not in h
    rec = await store.record(job_id)
    assert list(rec.actions) == ["c2"] and rec.actions["c2"]["answer"] is None
    assert await store.answer_actions(job_id, [("c2", {"content": "two"})], "client") is True


async def test_answers_to_a_job_that_is_not_paused_are_refused(store):
    queued, _ = await store.submit(Submission(JobRequest(messages=[Message(role="user", content="hi")]), model="m"))
    before = await snapshot(store, queued)
    with pytest.raises(errors.NotPaused, match="is queued"):
        await store.answer_actions(queued, [("c1", {"content": "x"})], "client")
    assert await snapshot(store, queued) == before

    job_id = await paused_job(store, pending("c1", "client"))
    await store.answer_actions(job_id, [("c1", {"content": "x"})], "client")  # resumed: queued again
    with pytest.raises(errors.NotPaused, match="is queued"):
        await store.answer_actions(job_id, [("c1", {"content": "x"})], "client")

    ended = await paused_job(store, pending("c1", "client"))
    assert await store.cancel(ended) == JobStatus.cancelled
    before = await snapshot(store, ended)
    with pytest.raises(errors.JobAlreadyEnded, match="has ended"):
        await store.answer_actions(ended, [("c1", {"content": "x"})], "client")
    assert await snapshot(store, ended) == before


async def test_another_tenants_job_looks_like_no_job(store):
    job_id = await paused_job(store, pending("c1", "client"), tenant="t1")
    before = await snapshot(store, job_id)
    with pytest.raises(JobNotFound):
        await store.answer_actions(job_id, [("c1", {"content": "x"})], "client", tenant="t2")
    with pytest.raises(JobNotFound):
        await store.answer_actions("job_nope", [("c1", {"content": "x"})], "client")
    assert await snapshot(store, job_id) == before
    assert await store.answer_actions(job_id, [("c1", {"content": "x"})], "client", tenant="t1") is True


async def test_cancel_ends_a_paused_job_at_once(store):
    job_id = await paused_job(store, pending("c1", "client"))
    assert await store.cancel(job_id) == JobStatus.cancelled
    rec = await store.record(job_id)
    assert rec.status == "cancelled" and rec.terminal
    assert await store.redis.zscore(keys.PAUSED, job_id) is None
    last = (await store.events(job_id))[-1]
    assert last.type == EventType.cancelled and "waiting for its caller" in last.data["reason"]


async def test_an_overdue_pause_ends_with_action_timeout(store):
    late = await paused_job(store, pending("c1", "client"), pending("c2", "client"), deadline_ms=now_ms() - 1)
    await store.answer_actions(late, [("c1", {"content": "x"})], "client")
    waiting = await paused_job(store, pending("c1", "client"))
    answered = await paused_job(store, pending("c1", "client"), deadline_ms=now_ms() - 1)
    await store.answer_actions(answered, [("c1", {"content": "x"})], "client")

    assert await pauses.expire_overdue(store) == [late]
    rec = await store.record(late)
    assert rec.status == "failed"
    last = (await store.events(late))[-1]
    assert last.type == EventType.error and last.data["code"] == ErrorCode.action_timeout.value
    assert "c2" in last.data["message"] and "c1" not in last.data["message"]
    result = await store.result(late)
    assert result.error.code == ErrorCode.action_timeout and result.messages[0].content == "hi"
    assert await store.redis.zrange(keys.PAUSED, 0, -1) == [waiting.encode()]
    assert (await store.record(answered)).status == "queued"
    assert await pauses.expire_overdue(store) == []


async def test_a_sweep_that_loses_to_a_resume_and_pause_leaves_the_new_pause(store):
    """The index said overdue, but the job was answered, resumed and paused again meanwhile."""
    job_id = await paused_job(store, pending("c1", "client"), deadline_ms=now_ms() - 1)
    await store.answer_actions(job_id, [("c1", {"content": "x"})], "client")
    await store.emit(job_id, EventType.started, {}, attempt=2, status=JobStatus.running)
    await store.pause(
        job_id, attempt=2, pending=[pending("c9", "client")], deadline_ms=now_ms() + 60_000, checkpoint={}
    )
    await store.redis.zadd(keys.PAUSED, {job_id: 1})  # as the sweep read it, before the new pause
    assert await pauses.expire_overdue(store) == []
    assert (await store.record(job_id)).status == "requires_action"


async def test_the_sdk_answers_straight_into_redis(redis_url, store):
    from toolq import Client

    job_id = await paused_job(store, pending("c1", "client"), pending("a1", "approval"))
    async with Client(redis_url=redis_url) as client:
        view = await client.submit_approvals(job_id, [{"tool_call_id": "a1", "approved": True}])
        assert [c.id for c in view.required_action.calls] == ["c1"]
        with pytest.raises(errors.WrongActionKind):
            await client.submit_tool_results(job_id, [{"tool_call_id": "a1", "content": "x"}])
        view = await client.submit_tool_results(job_id, [{"tool_call_id": "c1", "content": "x"}])
        assert view.status == JobStatus.queued and view.attempt == 2
        with pytest.raises(errors.JobNotFoundError):
            await client.submit_tool_results("job_nope", [{"tool_call_id": "c1", "content": "x"}])
