"""The effect journal (toolq/tools/journal.py) on a real Redis: a second run under a key returns the
recorded result without acting, two runs at once act once, a run that raised leaves the key free,
and the documented edge: a runner that died before recording leaves its hold, after which the next
run acts again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from store.durability import Durability
from store.journal import Journal
from toolq.tools import CallContext, ToolRegistry, current_call


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_a_second_run_returns_the_record_without_acting(r):
    journal, acted = Journal(r), []

    def act() -> dict:
        acted.append(1)
        return {"refund": "re_1", "n": len(acted)}

    first = await journal.once("fx_" + "a" * 32, act)
    second = await journal.once("fx_" + "a" * 32, act)
    assert first == second == {"refund": "re_1", "n": 1} and acted == [1]
    assert await journal.once("fx_" + "b" * 32, act) == {"refund": "re_1", "n": 2}  # another key acts
    assert await r.ttl("toolq:effect:fx_" + "a" * 32) > 0  # the record expires


async def test_two_runs_at_once_act_once_and_both_get_the_result(r):
    journal, acted = Journal(r), []

    async def act() -> str:
        acted.append(1)
        await asyncio.sleep(0.3)
        return "done"

    got = await asyncio.gather(*(journal.once("fx_" + "c" * 32, act, hold_s=5) for _ in range(3)))
    assert got == ["done"] * 3 and acted == [1]


async def test_a_run_that_raised_records_nothing_and_the_next_acts_at_once(r):
    journal = Journal(r)

    def fail() -> str:
        raise RuntimeError("the card was declined")

    with pytest.raises(RuntimeError):
        await journal.once("fx_" + "d" * 32, fail, hold_s=30)
    t0 = asyncio.get_running_loop().time()
    assert await journal.once("fx_" + "d" * 32, lambda: "ok", hold_s=30) == "ok"
    assert asyncio.get_running_loop().time() - t0 < 1.0  # not held for 30 s by the failed run
    assert await journal.runs("fx_" + "d" * 32) == 2


async def test_a_runner_that_died_before_recording_is_taken_over_when_its_hold_ends(r):
    """The limit the journal documents: acting and recording are not one step. A runner that
    decided to act and never recorded (it died) holds the key for its hold; then the next run acts
    again, and the record says two runs decided to act."""
    journal, key = Journal(r), "fx_" + "e" * 32
    started = asyncio.Event()

    async def dies() -> str:
        started.set()
        await asyncio.sleep(30)  # cancelled below: the runner is gone with no record
        return "never"

    task = asyncio.create_task(journal.once(key, dies, hold_s=0.5))
    await started.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # a cancelled runner drops its hold as a failed one (it did not finish acting) ...
    assert await journal.once(key, lambda: "second", hold_s=0.5) == "second"
    # ... and one that could not (SIGKILL) is simulated by taking the decision and walking away
    key2 = "fx_" + "f" * 32
    await journal._once(record=f"toolq:effect:{key2}", owner="dead", hold_ms=400, ttl_ms=60_000)
    t0 = asyncio.get_running_loop().time()
    assert await journal.once(key2, lambda: "after the hold", hold_s=1) == "after the hold"
    assert asyncio.get_running_loop().time() - t0 >= 0.3
    assert await journal.runs(key2) == 2


async def test_a_registry_tool_journals_through_current_call(r):
    reg, sent = ToolRegistry(), []

    @reg.tool(idempotent=True)
    async def refund(order: str) -> str:
        """Refunds an order once per effect key."""
        call = current_call()

        def act() -> str:
            sent.append((order, call.key))
            return f"refunded {order}"

        return await call.once(act)

    ctx = CallContext(key="fx_" + "9" * 32, tool="refund", journal=Journal(r))
    first = await reg.run(reg.check("refund", {"order": "o1"}), context=ctx)
    again = await reg.run(reg.check("refund", {"order": "o1"}), context=ctx)
    assert first.ok and again.ok and first.content == again.content
    assert sent == [("o1", "fx_" + "9" * 32)]


async def test_with_wait_on_the_record_goes_with_wait_and_the_result_comes_back_even_short(r):
    """No replica here: WAIT 1 comes back with 0 after its timeout, and the result (the effect
    has happened) is returned and recorded all the same."""
    journal, acted = Journal(r, durability=Durability(replicas=1, timeout_ms=50)), []
    assert await journal.once("fx_" + "1" * 32, lambda: acted.append(1) or "sent") == "sent"
    assert await journal.once("fx_" + "1" * 32, lambda: acted.append(1) or "again") == "sent"
    assert acted == [1]
