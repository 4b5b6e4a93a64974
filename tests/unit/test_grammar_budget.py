"""The worker's grammar budget (worker/grammar/budget.py, pool.py, builds.py): a repetition past
it is refused before the converter writes it out; a build runs in a build process, which is killed
at the timeout (the process is gone, its CPU freed); a failed build is remembered by digest and
refused at once; the event loop never waits on a build."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time

import pytest

from worker.grammar.budget import GrammarBudget, GrammarTooLarge
from worker.grammar.builds import GrammarBuilds
from worker.grammar.errors import GrammarBuildFailed
from worker.grammar.pool import BuildPool
from worker.grammar.tasks import schema_grammar_text

# The hostile schema runs in a child process that may map at most 3 GiB (DESIGN.md: a
# minLength in the hundreds of millions once grew a worker to 23.9 GB before the OOM killer).
_CHILD = textwrap.dedent(
    """
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    from worker.grammar import GrammarBuilder
    from worker.grammar.budget import GrammarTooLarge
    started = time.monotonic()
    try:
        GrammarBuilder().schema({"type": "string", "minLength": 300_000_000}, "hostile")
    except GrammarTooLarge as e:
        print(f"refused in {time.monotonic() - started:.2f} s: {e}")
    """
)


def test_a_hostile_length_is_refused_before_it_is_written_out():
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("refused in "), out.stdout + out.stderr[-2000:]
    assert float(out.stdout.split()[2]) < 1.0
    assert "the grammar of hostile would be larger than the worker's budget" in out.stdout
    assert "(TOOLQ_GRAMMAR_MAX_BYTES)" in out.stdout


def _schema(n: int) -> str:
    import json

    return json.dumps(
        {"type": "object", "properties": {f"p{i}": {"type": "string", "minLength": 500} for i in range(n)}}
    )


def slow_build(seconds: float) -> str:
    """A build that takes ``seconds`` (the build process imports this module to run it)."""
    time.sleep(seconds)
    return ""


def _state(pid: int) -> str:
    """The process's state letter (Z: a zombie, using no CPU), or "gone"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


@pytest.fixture
async def pool():
    p = BuildPool(1)
    yield p
    p.close()


async def test_a_build_within_the_budget_gives_the_grammar_and_one_past_it_the_error(pool):
    budget = GrammarBudget(max_bytes=16384)
    assert "answer" in await pool.run(schema_grammar_text, (_schema(1),), budget, "the grammar")
    with pytest.raises(GrammarTooLarge, match="budget of 16384 bytes"):
        await pool.run(schema_grammar_text, (_schema(8),), budget, "the grammar")
    with pytest.raises(GrammarBuildFailed, match="cannot be built"):
        await pool.run(schema_grammar_text, ("not json",), budget, "the grammar")
    assert pool.killed == 0 and len(pool.pids()) == 1  # failures end the build, not the process


async def test_a_build_past_its_time_is_killed_and_the_loop_goes_on_meanwhile(pool):
    await pool.ready()
    (pid,) = pool.pids()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    with pytest.raises(GrammarTooLarge, match=r"took longer than 0\.3 s .*the build was stopped"):
        await pool.run(slow_build, (30,), GrammarBudget(timeout_s=0.3), "the grammar")
    waited = time.monotonic() - started
    task.cancel()
    assert 0.3 <= waited < 0.8
    assert ticks >= 10  # the loop ran all along
    assert pool.killed == 1 and pid not in pool.pids()
    for _ in range(100):  # killed at once: gone, or a zombie until reaped, never running on
        if _state(pid) in ("Z", "gone"):
            break
        await asyncio.sleep(0.01)
    assert _state(pid) in ("Z", "gone")
    # the next build gets a fresh process
    assert "answer" in await pool.run(schema_grammar_text, (_schema(1),), GrammarBudget(), "the grammar")
    assert pool.pids() and pid not in pool.pids()


async def test_a_build_cancelled_with_its_job_is_killed(pool):
    await pool.ready()
    (pid,) = pool.pids()
    build = asyncio.create_task(pool.run(slow_build, (30,), GrammarBudget(timeout_s=20), "the grammar"))
    await asyncio.sleep(0.2)
    build.cancel()
    with pytest.raises(asyncio.CancelledError):
        await build
    await asyncio.sleep(0.1)
    assert _state(pid) in ("Z", "gone") and not pool.pids()


async def test_builds_cancelled_while_waiting_for_a_process_leave_the_pool_working(pool):
    """Jobs superseded together (their worker lost its leases in a Redis outage): the running build
    is killed, and the process started for the next waiter finds it cancelled too. That process
    goes to the pool: before, it was killed, and every later build waited forever for a process."""
    await pool.ready()
    builds = [
        asyncio.create_task(pool.run(slow_build, (30,), GrammarBudget(timeout_s=20), f"grammar {i}")) for i in range(3)
    ]
    await asyncio.sleep(0.2)  # one builds, two wait for the pool's one process
    for b in builds:  # one by one, as the heartbeat interrupts them, a Redis round trip apart
        b.cancel()
        await asyncio.sleep(0.01)
    # the takeover's build comes while the process started for a cancelled waiter is still
    # starting (the pool's one process is being started: this build must wait for it)
    await asyncio.sleep(0.05)
    after = asyncio.create_task(pool.run(schema_grammar_text, (_schema(1),), GrammarBudget(), "the grammar"))
    await asyncio.gather(*builds, return_exceptions=True)
    assert "answer" in await asyncio.wait_for(after, timeout=30)


async def test_a_failed_build_is_remembered_by_digest_and_refused_at_once(pool):
    builds = GrammarBuilds(GrammarBudget(max_bytes=16384, timeout_s=0.5), pool=pool)
    with pytest.raises(GrammarTooLarge, match="budget of 16384 bytes") as first:
        await builds.get(["answer", _schema(8)], schema_grammar_text, (_schema(8),), "the grammar")
    with pytest.raises(GrammarTooLarge, match=r"took longer than 0\.5 s"):
        await builds.get(["slow"], slow_build, (30,), "the grammar")
    runs = pool.runs
    started = time.monotonic()
    with pytest.raises(GrammarTooLarge) as again:
        await builds.get(["answer", _schema(8)], schema_grammar_text, (_schema(8),), "the grammar")
    with pytest.raises(GrammarTooLarge, match=r"took longer than 0\.5 s"):
        await builds.get(["slow"], slow_build, (30,), "the grammar")
    assert time.monotonic() - started < 0.05 and pool.runs == runs  # no process asked
    assert str(again.value) == str(first.value)
    # a grammar built is kept too; a different budget is a different digest
    ok = await builds.get(["answer", _schema(1)], schema_grammar_text, (_schema(1),), "the grammar")
    assert await builds.get(["answer", _schema(1)], schema_grammar_text, (_schema(1),), "the grammar") == ok
    assert pool.runs == runs + 1
    assert not GrammarBuilds(GrammarBudget(max_bytes=1 << 20), pool=pool).failed(["answer", _schema(8)])


async def test_the_failures_remembered_are_bounded(pool):
    builds = GrammarBuilds(GrammarBudget(max_bytes=16384, remembered_failures=2), pool=pool)
    for n in (8, 9, 10):
        with pytest.raises(GrammarTooLarge):
            await builds.get(["answer", n], schema_grammar_text, (_schema(n),), "the grammar")
    assert [builds.failed(["answer", n]) for n in (8, 9, 10)] == [False, True, True]


def test_build_processes_never_import_the_engine():
    code = (
        "import sys, worker.grammar.build_process as b, worker.grammar.tasks, worker.formats; "
        "print(any(m.startswith('worker.engine') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert out.stdout.strip() == "False", out.stdout + out.stderr[-1000:]
