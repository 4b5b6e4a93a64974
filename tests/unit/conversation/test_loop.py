"""The conversation loop over a scripted engine: every rule in worker/conversation/loop.py's docstring.

The format, template and tool registry are the real ones; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from toolq.tools import ToolRegistry
from toolq.wire.protocol import JobRequest, Message, ToolCall
from worker.conversation import Aborted, ConversationLoop, LoopState
from worker.formats import get_format
from worker.generation import GenerationRequest
from worker.scripted import ScriptedEngine
from worker.templates import TEMPLATES_DIR, ChatTemplate


def call(name: str, **args: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.text: list[str] = []
        self.checkpoints: list[dict] = []
        self.call_checkpoints: list[dict] = []  # taken when a turn's calls are announced

    async def tool_call(self, call: ToolCall, iteration: int, *, checkpoint=None, **kw) -> None:
        self.events.append(("tool_call", (call.name, call.arguments, iteration)))
        if checkpoint is not None:
            self.call_checkpoints.append(checkpoint)

    async def tool_result(self, call: ToolCall, *, ok, content, error, duration_ms, executed, checkpoint, **kw) -> None:
        self.events.append(("tool_result", (call.name, ok, content, error, executed)))
        self.checkpoints.append(checkpoint)

    def push_text(self, text: str, reader=None) -> None:
        self.text.append(text)

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


class RecordingEngine(ScriptedEngine):
    """The scripted engine, remembering every request (grammar, trigger) it was given."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.requests: list[GenerationRequest] = []

    def generate_sync(self, req: GenerationRequest):
        self.requests.append(req)
        return super().generate_sync(req)


@pytest.fixture
def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.ran = []  # type: ignore[attr-defined]

    @reg.tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        reg.ran.append(("add", a, b))
        return a + b

    @reg.tool
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"boom: {reason}")

    @reg.tool(timeout_s=0.2)
    async def hang() -> str:
        """Never returns."""
        await asyncio.sleep(30)
        return "never"

    return reg


def make_loop(registry: ToolRegistry, replies: list[str], **kw: Any) -> tuple[ConversationLoop, RecordingEngine]:
    engine = RecordingEngine(replies, **kw)
    template = ChatTemplate.from_file(TEMPLATES_DIR / "hermes3_tool_calling.j2")
    return ConversationLoop(engine, template, get_format("hermes"), registry, tool_timeout_s=5), engine


def req(text: str = "What is 2 + 3?", **kw: Any) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content=text)], **kw)


async def test_plain_answer_is_final(registry):
    loop, engine = make_loop(registry, ["Hello there."])
    sink = Sink()
    out = await loop.run(req("hi"), sink)
    assert (out.content, out.finish_reason, out.state.iterations) == ("Hello there.", "stop", 1)
    assert sink.events == []
    assert out.state.messages[-1] == Message(role="assistant", content="Hello there.")
    # auto mode: the grammar is lazy, triggered by the opening tag
    assert engine.requests[0].grammar_trigger == "<tool_call>"


async def test_tool_call_then_answer(registry):
    loop, engine = make_loop(registry, [call("add", a=2, b=3), "2 + 3 = 5."])
    sink = Sink()
    out = await loop.run(req(), sink)
    assert sink.events == [("tool_call", ("add", {"a": 2, "b": 3}, 1)), ("tool_result", ("add", True, "5", None, True))]
    assert (out.content, out.finish_reason, out.state.iterations) == ("2 + 3 = 5.", "stop", 2)
    roles = [m.role for m in out.state.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert out.state.messages[2].content == "5"
    # the second prompt carries the result as a <tool_response>
    assert "<tool_response>\n5\n</tool_response>" in engine.prompts[1]
    # the checkpoint written with the result holds the whole turn
    assert [m["role"] for m in sink.checkpoints[0]["messages"]] == ["user", "assistant", "tool"]
    # and the one written when the calls were announced holds the turn's calls, without results
    assert [m["role"] for m in sink.call_checkpoints[0]["messages"]] == ["user", "assistant"]


async def test_calls_of_one_turn_run_concurrently(registry):
    starts: list[float] = []

    @registry.tool
    async def slow(n: int) -> int:
        """Sleeps."""
        starts.append(time.perf_counter())
        await asyncio.sleep(0.3)
        return n

    loop, _ = make_loop(registry, [call("slow", n=1) + "\n" + call("slow", n=2), "done"])
    t0 = time.perf_counter()
    out = await loop.run(req(), Sink())
    assert time.perf_counter() - t0 < 0.55
    assert sorted(m.content for m in out.state.messages if m.role == "tool") == ["1", "2"]


async def test_garbage_call_is_reported_to_the_model(registry):
    loop, engine = make_loop(registry, ['<tool_call>{"name": "add", "arguments": {a: 2,,}</tool_call>', "I give up."])
    sink = Sink()
    out = await loop.run(req(), sink)
    assert sink.events == []  # nothing readable was called
    assert out.state.iterations == 2 and out.content == "I give up."
    feedback = out.state.messages[2]
    assert feedback.role == "tool" and "could not be used" in feedback.content
    assert "could not be used" in engine.prompts[1]


async def test_tool_that_raises_becomes_an_error_result(registry):
    loop, engine = make_loop(registry, [call("explode", reason="x"), "It failed."])
    sink = Sink()
    out = await loop.run(req(), sink)
    name, ok, _content, error, executed = sink.events[1][1]
    assert (name, ok, executed) == ("explode", False, True)
    assert "ValueError" in error and "boom: x" in error
    assert "boom: x" in engine.prompts[1]
    assert out.content == "It failed."


async def test_tool_that_hangs_times_out(registry):
    loop, _ = make_loop(registry, [call("hang"), "Too slow."])
    sink = Sink()
    t0 = time.perf_counter()
    out = await loop.run(req(), sink)
    assert time.perf_counter() - t0 < 2
    _, ok, _, error, _ = sink.events[1][1]
    assert not ok and "timed out" in error
    assert out.content == "Too slow."


async def test_unknown_tool_and_invalid_arguments_are_not_executed(registry):
    loop, _ = make_loop(registry, [call("nope", x=1) + call("add", a="2", b=3), "ok"])
    sink = Sink()
    await loop.run(req(), sink)
    results = [v for k, v in sink.events if k == "tool_result"]
    by_name = {r[0]: r for r in results}
    assert "unknown tool 'nope'" in by_name["nope"][3] and "add" in by_name["nope"][3]
    assert by_name["add"][1] is False and by_name["add"][4] is False
    assert "'a'" in by_name["add"][3] and "integer" in by_name["add"][3]
    assert registry.ran == []


async def test_repeated_call_is_not_executed_again(registry):
    loop, _ = make_loop(registry, [call("add", a=2, b=3), call("add", b=3, a=2), "5"])
    sink = Sink()
    out = await loop.run(req(), sink)
    assert registry.ran == [("add", 2, 3)]
    second = [v for k, v in sink.events if k == "tool_result"][1]
    assert second[4] is False and "already called add" in second[2] and "5" in second[2]
    assert out.state.iterations == 3


async def test_cut_inside_a_call_is_not_executed(registry):
    # max_tokens 5 scripted "tokens" of 4 characters: the call is cut in the middle
    loop, _ = make_loop(registry, [call("add", a=2, b=3), "fine"])
    sink = Sink()
    out = await loop.run(req(max_tokens=5), sink)
    assert registry.ran == [] and sink.events == []
    assert "cut off" in out.state.messages[2].content


async def test_cap_gives_one_last_round_without_tools(registry):
    loop, engine = make_loop(registry, [call("add", a=1, b=1), call("add", a=2, b=2), "Out of rounds: 4."])
    sink = Sink()
    out = await loop.run(req(max_iterations=2), sink)
    assert out.finish_reason == "max_iterations"
    assert out.content == "Out of rounds: 4."
    assert out.state.iterations == 3
    assert registry.ran == [("add", 1, 1), ("add", 2, 2)]
    last = engine.requests[-1]
    assert last.grammar is None and "Here are the available tools" not in engine.prompts[-1]


async def test_required_constrains_only_the_first_round(registry):
    loop, engine = make_loop(registry, [call("add", a=2, b=3), "5"])
    await loop.run(req(tool_choice="required"), Sink())
    first, second = engine.requests
    assert first.grammar and first.grammar_trigger is None and '\\"add\\"' in first.grammar
    assert second.grammar_trigger == "<tool_call>"


async def test_parallel_tool_calls_off_limits_the_grammar_to_one_call(registry):
    loop, engine = make_loop(registry, [call("add", a=2, b=3), "5", call("add", a=1, b=1), "2"])
    await loop.run(req(tool_choice="required", parallel_tool_calls=False), Sink())
    await loop.run(req(parallel_tool_calls=True), Sink())
    single, _, multi, _ = engine.requests
    specs = (await loop.tools.box(req())).specs()
    assert single.grammar == loop.fmt.call_grammar(specs)
    assert multi.grammar == loop.fmt.grammar(specs, required=True)
    assert multi.grammar_trigger == "<tool_call>"


async def test_grammars_are_built_once_per_tool_set(registry):
    loop, engine = make_loop(registry, [call("add", a=2, b=3), "5"])
    pool = loop.grammars.builds.pool  # grammars build in build processes (worker/grammar/pool.py)
    runs = pool.runs
    await loop.run(req(), Sink())
    await loop.run(req("again"), Sink())
    assert len(engine.requests) == 3 and pool.runs == runs + 1  # the second job answers at once
    assert len({r.grammar for r in engine.requests}) == 1


async def test_named_tool_shows_and_constrains_that_tool_only(registry):
    loop, engine = make_loop(registry, [call("add", a=2, b=3), "5"])
    choice = {"type": "function", "function": {"name": "add"}}
    await loop.run(req(tool_choice=choice), Sink())
    first = engine.requests[0]
    assert '\\"add\\"' in first.grammar and "explode" not in first.grammar
    assert "explode" not in engine.prompts[0]


async def test_tool_choice_none_offers_no_tools(registry):
    loop, engine = make_loop(registry, ["Just text."])
    out = await loop.run(req(tool_choice="none"), Sink())
    assert out.content == "Just text."
    assert engine.requests[0].grammar is None and "Here are the available tools" not in engine.prompts[0]


async def test_unknown_job_tool_names_raise_key_error(registry):
    loop, _ = make_loop(registry, ["x"])
    with pytest.raises(KeyError):
        await loop.run(req(tools=["add", "missing"]), Sink())


async def test_resume_does_not_run_again_a_call_an_earlier_attempt_started(registry):
    loop, _ = make_loop(registry, ["All done."])
    a = ToolCall(function={"name": "add", "arguments": {"a": 1, "b": 2}})
    b = ToolCall(function={"name": "add", "arguments": {"a": 5, "b": 5}})
    state = LoopState(
        messages=[
            Message(role="user", content="go"),
            Message(role="assistant", tool_calls=[a, b]),
            Message(role="tool", tool_call_id=a.id, name="add", content="3"),
        ],
        iterations=1,
    )
    sink = Sink()
    out = await loop.run(req(), sink, state=LoopState.from_checkpoint(state.checkpoint()))
    assert registry.ran == []  # at most once: b may have run before the attempt was lost
    (name, ok, _, error, executed) = sink.events[0][1]
    assert (sink.events[0][0], name, ok, executed) == ("tool_result", "add", False, False)
    assert "interrupted before its result was recorded" in error
    assert out.content == "All done." and out.state.iterations == 2


async def test_stop_flag_aborts_generation(registry):
    loop, _ = make_loop(registry, ["x" * 4000], token_delay_s=0.005)
    stop = threading.Event()
    task = asyncio.create_task(loop.run(req(), Sink(), stop_event=stop))
    await asyncio.sleep(0.1)
    stop.set()
    t0 = time.perf_counter()
    with pytest.raises(Aborted):
        await task
    assert time.perf_counter() - t0 < 0.1


async def test_stream_tokens_pushes_text(registry):
    loop, _ = make_loop(registry, ["Streaming works fine."])
    sink = Sink()
    await loop.run(req(stream_tokens=True), sink)
    assert "".join(sink.text) == "Streaming works fine."
    sink2 = Sink()
    await loop.run(req(), sink2)
    assert sink2.text == []
