"""A call's arguments are validated once: ``check`` validates, ``run`` takes the checked values, and
the conversation loop goes through exactly that path."""

from __future__ import annotations

import json

import toolq.tools.registry as registry_module
from toolq.tools import ToolRegistry
from toolq.wire.protocol import JobRequest, Message
from worker.conversation import ConversationLoop
from worker.formats import get_format
from worker.scripted import ScriptedEngine
from worker.templates import TEMPLATES_DIR, ChatTemplate


class _Sink:
    async def tool_call(self, call, iteration, **kw) -> None: ...

    async def tool_result(self, call, **kw) -> None: ...

    def push_text(self, text: str, reader=None) -> None: ...


def _counting(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = registry_module.check_arguments

    def counted(found, arguments):
        seen.append(found.name)
        return real(found, arguments)

    monkeypatch.setattr(registry_module, "check_arguments", counted)
    return seen


async def test_run_uses_the_checked_values_and_does_not_validate_again(monkeypatch):
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        return a + b

    seen = _counting(monkeypatch)
    checked = reg.check("add", {"a": 2, "b": 3})
    assert (checked.ok, checked.kwargs) == (True, {"a": 2, "b": 3})
    assert (await reg.run(checked)).content == "5"
    assert seen == ["add"]

    bad = reg.check("add", {"a": "2"})
    out = await reg.run(bad)
    assert not out.ok and out.error == out.content == "\n".join(bad.errors)


async def test_the_loop_validates_each_call_once(monkeypatch):
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    seen = _counting(monkeypatch)
    call = "<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}}) + "\n</tool_call>"
    engine = ScriptedEngine([call, "5."])
    template = ChatTemplate.from_file(TEMPLATES_DIR / "hermes3_tool_calling.j2")
    loop = ConversationLoop(engine, template, get_format("hermes"), reg, tool_timeout_s=5)
    out = await loop.run(JobRequest(messages=[Message(role="user", content="2 + 3?")]), _Sink())
    assert out.content == "5."
    assert seen == ["add"]
