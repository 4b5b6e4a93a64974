"""Capability probing: what each maintained template can render, found once."""

from __future__ import annotations

import pytest

from tests.support.seed import SEED_TOOLS
from tests.unit.templates.conversations import ALL_TEMPLATES, HERMES, load, seed_messages
from worker.formats import get_format
from worker.templates import Capabilities

EXPECTED_CAPABILITIES = {
    "hermes3_tool_calling": Capabilities(
        system_role=True, tool_role=True, tool_calls=True, renders_tools=True, strict_alternation=False
    ),
    "mistral_instruct_v0_1": Capabilities(
        system_role=False, tool_role=False, tool_calls=False, renders_tools=False, strict_alternation=True
    ),
    "functionary_v2_2": Capabilities(
        system_role=True,
        tool_role=True,
        tool_calls=True,
        renders_tools=False,
        strict_alternation=False,
        tool_call_arguments_as_string=True,
    ),
    "hermes_2_pro_mistral": Capabilities(
        system_role=True, tool_role=True, tool_calls=False, renders_tools=False, strict_alternation=False
    ),
    "llama2": Capabilities(
        system_role=True, tool_role=False, tool_calls=False, renders_tools=False, strict_alternation=True
    ),
}


@pytest.mark.parametrize("template", ALL_TEMPLATES)
def test_capabilities(template):
    assert load(template).capabilities == EXPECTED_CAPABILITIES[template]


def test_capabilities_are_probed_once(monkeypatch):
    t = load("llama2")
    first = t.capabilities
    calls = []
    monkeypatch.setattr(t, "_probe", lambda: calls.append(1))
    for _ in range(3):
        t.render(seed_messages(), tools=SEED_TOOLS, fmt=HERMES)
    assert t.capabilities is first and calls == []


def test_wrapping_detection_is_per_format():
    t = load("hermes3_tool_calling")
    assert t.wraps_tool_results(get_format("hermes")) is True
    assert t.wraps_tool_results(get_format("thoughtful_steps")) is False
    assert load("hermes_2_pro_mistral").wraps_tool_results(get_format("hermes")) is False
