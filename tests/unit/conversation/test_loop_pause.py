"""Calls that wait on the caller (worker/conversation/): client tools and approvals pause the loop with
``requires_action``; resuming with the caller's answers finishes the turn and goes on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.conversation.test_loop import Sink, call, make_loop
from toolq.tools import ToolRegistry
from toolq.wire.protocol import FunctionTool, JobRequest, Message
from worker.conversation import LoopState


@pytest.fixture
def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.ran = []  # type: ignore[attr-defined]

    @reg.tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        reg.ran.append(("add", a, b))
        return a + b

    @reg.tool(requires_approval=True)
    def wipe(path: str) -> str:
        """Deletes a path."""
        reg.ran.append(("wipe", path))
        return f"wiped {path}"

    return reg


WEATHER = FunctionTool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city"],
            },
        },
    }
)


def req(tools: list[Any], **kw: Any) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="Go")], tools=tools, **kw)


def resume(out: Any, answers: dict[str, dict[str, Any]]) -> LoopState:
    state = LoopState.from_checkpoint(out.state.checkpoint())
    state.answers = answers
    return state


async def test_a_client_tool_call_pauses_and_resumes_with_the_callers_result(registry):
    loop, engine = make_loop(registry, [call("weather", city="Oslo"), "It is sunny in Oslo."])
    sink = Sink()
    out = await loop.run(req([WEATHER]), sink)
    assert out.finish_reason == "requires_action"
    [p] = out.pending
    assert (p.name, p.arguments, p.kind, p.where) == ("weather", {"city": "Oslo"}, "client", "client")
    assert sink.kinds() == ["tool_call"]  # announced, not run
    assert out.state.awaiting == {p.id: "client"}

    sink2 = Sink()
    done = await loop.run(req([WEATHER]), sink2, state=resume(out, {p.id: {"content": "sunny, 21 C"}}))
    assert (done.finish_reason, done.content) == ("stop", "It is sunny in Oslo.")
    assert sink2.events == [("tool_result", ("weather", True, "sunny, 21 C", None, True))]
    assert "sunny, 21 C" in engine.prompts[-1]
    assert done.state.awaiting == {}


async def test_client_tool_arguments_are_validated_against_the_whole_schema_before_pausing(registry):
    # "maximum" is beyond what the grammar enforces: the schema check catches it and the model retries
    loop, _ = make_loop(registry, [call("weather", city="Oslo", days=30), call("weather", city="Oslo", days=3)])
    sink = Sink()
    out = await loop.run(req([WEATHER]), sink)
    assert out.finish_reason == "requires_action" and out.pending[0].arguments == {"city": "Oslo", "days": 3}
    first_result = sink.events[1]
    assert first_result[0] == "tool_result" and "30 is greater than the maximum of 7" in first_result[1][3]


async def test_server_calls_of_a_turn_run_while_the_client_call_waits(registry):
    both = call("add", a=2, b=3) + "\n" + call("weather", city="Rome")
    loop, _ = make_loop(registry, [both, "Done."])
    sink = Sink()
    out = await loop.run(req(["add", WEATHER]), sink)
    assert out.finish_reason == "requires_action" and [p.name for p in out.pending] == ["weather"]
    assert registry.ran == [("add", 2, 3)]
    assert sink.kinds() == ["tool_call", "tool_call", "tool_result"]
    state = resume(out, {out.pending[0].id: {"content": "rain"}})
    done = await loop.run(req(["add", WEATHER]), Sink(), state=state)
    assert done.content == "Done." and registry.ran == [("add", 2, 3)]  # not run twice


async def test_approval_approved_runs_the_call(registry):
    loop, _ = make_loop(registry, [call("wipe", path="/tmp/x"), "Wiped."])
    out = await loop.run(req(["wipe"]), Sink())
    [p] = out.pending
    assert (p.kind, p.where) == ("approval", "worker") and registry.ran == []
    sink = Sink()
    done = await loop.run(req(["wipe"]), sink, state=resume(out, {p.id: {"approved": True}}))
    assert registry.ran == [("wipe", "/tmp/x")] and done.content == "Wiped."
    assert sink.events == [("tool_result", ("wipe", True, "wiped /tmp/x", None, True))]


async def test_approval_denied_tells_the_model_why_and_runs_nothing(registry):
    loop, engine = make_loop(registry, [call("wipe", path="/"), "I will not delete it."])
    out = await loop.run(req(["wipe"]), Sink())
    sink = Sink()
    answer = {"approved": False, "reason": "not the root"}
    done = await loop.run(req(["wipe"]), sink, state=resume(out, {out.pending[0].id: answer}))
    assert registry.ran == [] and done.content == "I will not delete it."
    [(kind, (name, ok, _, error, executed))] = sink.events
    assert (kind, name, ok, executed) == ("tool_result", "wipe", False, False)
    assert "refused by the user: not the root" in error and "not the root" in engine.prompts[-1]


async def test_the_request_can_require_approval_for_a_served_tool(registry):
    approved_add = FunctionTool.model_validate(
        {"type": "function", "function": {"name": "add"}, "execution": "server", "requires_approval": True}
    )
    loop, _ = make_loop(registry, [call("add", a=1, b=1)])
    out = await loop.run(req([approved_add]), Sink())
    assert out.finish_reason == "requires_action" and out.pending[0].kind == "approval" and registry.ran == []


async def test_a_paused_turn_without_answers_stays_paused(registry):
    loop, engine = make_loop(registry, [call("weather", city="Oslo")])
    out = await loop.run(req([WEATHER]), Sink())
    again = await loop.run(req([WEATHER]), Sink(), state=resume(out, {}))
    assert again.finish_reason == "requires_action" and [p.id for p in again.pending] == [out.pending[0].id]
    assert len(engine.prompts) == 1  # nothing generated while waiting


async def test_an_approved_client_tool_then_waits_for_its_result(registry):
    tool = WEATHER.model_copy(update={"requires_approval": True})
    loop, _ = make_loop(registry, [call("weather", city="Oslo"), "ok"])
    out = await loop.run(req([tool]), Sink())
    assert out.pending[0].kind == "approval"
    again = await loop.run(req([tool]), Sink(), state=resume(out, {out.pending[0].id: {"approved": True}}))
    assert again.finish_reason == "requires_action" and again.pending[0].kind == "client"


async def test_a_client_error_result_reaches_the_model_as_a_failure(registry):
    loop, _ = make_loop(registry, [call("weather", city="Oslo"), "Sorry."])
    out = await loop.run(req([WEATHER]), Sink())
    sink = Sink()
    state = resume(out, {out.pending[0].id: {"content": "service down", "is_error": True}})
    await loop.run(req([WEATHER]), sink, state=state)
    assert sink.events == [("tool_result", ("weather", False, "", "service down", True))]
