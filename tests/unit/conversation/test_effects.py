"""Effect keys in the loop (worker/conversation/steps.py ``key_of``) and calls whose outcome a lost
attempt left unknown (worker/conversation/triage.py): the real format, template and registry; only
the model is scripted."""

from __future__ import annotations

import re
from typing import Any

from tests.unit.conversation.test_loop import call, make_loop, req
from toolq.tools import NoCallError, ToolRegistry, current_call, effect_key
from toolq.wire.protocol import Message, ToolCall
from worker.conversation import LoopState


class KeySink:
    """Keeps each event's effect key and flags."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    async def tool_call(self, call: ToolCall, iteration: int, **kw: Any) -> None:
        self.events.append(("tool_call", call.id, kw))

    async def tool_result(self, call: ToolCall, **kw: Any) -> None:
        self.events.append(("tool_result", call.id, kw))

    def push_text(self, text: str, reader: Any = None) -> None: ...


def keyed_registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.seen = []  # type: ignore[attr-defined]

    @reg.tool(idempotent=True)
    def charge(cents: int) -> str:
        """Charges a card."""
        reg.seen.append(("charge", current_call().key))  # type: ignore[attr-defined]
        return "charged"

    @reg.tool
    def email(to: str) -> str:
        """Sends an email (not declared idempotent)."""
        reg.seen.append(("email", current_call().key))  # type: ignore[attr-defined]
        return "sent"

    @reg.tool
    async def whoami() -> str:
        """The key, from an async tool."""
        return current_call().key

    return reg


def test_effect_key_is_fx_and_32_hex_and_depends_on_job_and_call():
    k = effect_key("job1", "call_1", "charge", {"cents": 5})
    assert re.fullmatch(r"fx_[0-9a-f]{32}", k)
    assert k == effect_key("job1", "call_1", "charge", {"cents": 5})
    others = {
        effect_key("job2", "call_1", "charge", {"cents": 5}),
        effect_key("job1", "call_2", "charge", {"cents": 5}),
        effect_key("job1", "call_1", "charge", {"cents": 6}),
        effect_key("job1", "call_1", "refund", {"cents": 5}),
    }
    assert k not in others and len(others) == 4


def test_current_call_outside_a_call_says_so():
    try:
        current_call()
    except NoCallError as e:
        assert "no tool call" in str(e)
    else:
        raise AssertionError("current_call() outside a call must raise")


async def test_one_key_per_call_in_the_events_and_in_the_tool():
    reg = keyed_registry()
    loop, _ = make_loop(reg, [call("charge", cents=5) + call("whoami"), "Done."])
    sink = KeySink()
    await loop.run(req(), sink, job_id="job-a")
    calls = [e for e in sink.events if e[0] == "tool_call"]
    results = {cid: kw for kind, cid, kw in sink.events if kind == "tool_result"}
    assert len(calls) == 2
    for _, cid, kw in calls:
        assert kw["effect_key"] == results[cid]["effect_key"]
    (_, charge_kw), (who_id, who_kw) = [(c[1], c[2]) for c in calls]
    assert reg.seen == [("charge", charge_kw["effect_key"])]  # a sync tool, in its thread
    assert who_kw["effect_key"] in results[who_id]["content"]  # an async tool, in its task
    assert charge_kw["effect_key"] != who_kw["effect_key"]


def _left(reg: ToolRegistry, name: str, **args: Any) -> tuple[LoopState, ToolCall]:
    """A checkpoint an attempt wrote when it announced ``name``'s call, then was lost."""
    c = ToolCall(function={"name": name, "arguments": args})
    state = LoopState(
        messages=[Message(role="user", content="go"), Message(role="assistant", tool_calls=[c])], iterations=1
    )
    return LoopState.from_checkpoint(state.checkpoint()), c


async def test_an_idempotent_call_left_unknown_runs_again_under_its_key_before_the_model_goes_on():
    reg = keyed_registry()
    state, c = _left(reg, "charge", cents=7)
    loop, engine = make_loop(reg, ["Charged."])
    sink = KeySink()
    out = await loop.run(req(), sink, state=state, job_id="job-b")
    key = effect_key("job-b", c.id, "charge", {"cents": 7})
    assert reg.seen == [("charge", key)]  # the same key the lost attempt used
    kind, cid, kw = sink.events[0]
    assert (kind, cid, kw["ok"], kw["rerun"], kw["effect_key"], kw["outcome_unknown"]) == (
        "tool_result",
        c.id,
        True,
        True,
        key,
        False,
    )
    assert "charged" in engine.prompts[0]  # the model read the result of the run again
    assert out.content == "Charged."


async def test_a_call_not_declared_idempotent_left_unknown_is_not_run_and_says_unknown():
    reg = keyed_registry()
    state, c = _left(reg, "email", to="a@b.c")
    loop, _ = make_loop(reg, ["Checked."])
    sink = KeySink()
    await loop.run(req(), sink, state=state, job_id="job-c")
    assert reg.seen == []
    kind, cid, kw = sink.events[0]
    assert (kind, cid, kw["ok"], kw["outcome_unknown"], kw["rerun"], kw["executed"]) == (
        "tool_result",
        c.id,
        False,
        True,
        False,
        False,
    )
    assert "interrupted before its result was recorded" in kw["error"]
    assert kw["effect_key"] == effect_key("job-c", c.id, "email", {"to": "a@b.c"})
