"""A grammar past the worker's budget ends its own job with ``grammar_too_large``; the worker's
other jobs go on (worker/grammar/budget.py). The engine is scripted, the grammar build is the real
one: llama.cpp's converter through the worker's GrammarBuilder, in a real worker on a real Redis."""

from __future__ import annotations

import asyncio
import time

from store.submission import Submission
from tests.integration.test_worker import events_of, req, running_worker, store  # noqa: F401  (a fixture)
from toolq.wire.protocol import EventType, FunctionTool
from worker.scripted import Rule, ScriptedEngine

# Admitted by the protocol's bounds (8 x 1,000 repetitions, the default total), but its grammar
# is 43 KB: past a worker budget of 16 KiB.
WIDE = FunctionTool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "wide",
            "parameters": {
                "type": "object",
                "properties": {f"p{i}": {"type": "string", "minLength": 1000} for i in range(8)},
            },
        },
    }
)


async def test_a_grammar_past_the_budget_ends_its_job_and_the_other_job_finishes(redis_url, store):  # noqa: F811
    engine = ScriptedEngine([Rule("slow", "fine " * 60), Rule("", "never")], token_delay_s=0.01, slots=2)
    async with running_worker(redis_url, engine, grammar_max_bytes=16384) as worker:
        plain, _ = await store.submit(Submission(req("slow", tool_choice="none"), model="scripted"))
        hostile, _ = await store.submit(
            Submission(req("call it", tools=[WIDE], tool_choice="required"), model="scripted")
        )
        started = time.monotonic()
        hostile_events, plain_events = await asyncio.gather(events_of(store, hostile), events_of(store, plain))
        last = hostile_events[-1]
        assert last.type == EventType.error and last.data["code"] == "grammar_too_large", last
        assert "TOOLQ_GRAMMAR_MAX_BYTES" in last.data["message"]
        assert plain_events[-1].type == EventType.final
        assert (await store.result(plain)).content == ("fine " * 60).strip()
        assert time.monotonic() - started < 15
        for _ in range(200):  # both attempts wrap up (their tasks end) before the worker closes
            if not worker.tasks:
                break
            await asyncio.sleep(0.05)
