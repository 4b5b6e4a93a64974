"""The worker's grammar budget (worker/grammar/budget.py): a repetition past it is refused before
the converter writes it out, and the loop never waits on a build past its time."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from worker.grammar import GrammarBuilder
from worker.grammar.budget import GrammarBudget, GrammarTooLarge, build

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


def _schema(n: int) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "string", "minLength": 1000} for i in range(n)}}


def _grammar(n: int) -> str:
    b = GrammarBuilder()
    b.add("root", b.schema(_schema(n), "args"))
    return b.render()


async def test_a_build_within_the_budget_gives_the_grammar_and_one_past_it_the_error():
    assert "args" in await build(lambda: _grammar(1), GrammarBudget(max_bytes=16384))
    with pytest.raises(GrammarTooLarge, match="budget of 16384 bytes"):
        await build(lambda: _grammar(8), GrammarBudget(max_bytes=16384))


async def test_the_loop_goes_on_while_a_grammar_builds_and_stops_waiting_at_the_timeout():
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    with pytest.raises(GrammarTooLarge, match=r"took longer than 0\.3 s"):
        await build(lambda: time.sleep(1.0), GrammarBudget(timeout_s=0.3))
    waited = time.monotonic() - started
    task.cancel()
    assert 0.3 <= waited < 0.8
    assert ticks >= 10  # the loop ran all along
