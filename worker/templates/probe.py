"""Capability probing: what a chat template can render, found by rendering sample conversations.

Templates differ in what they can show. Many have no tool role, cannot render ``tool_calls``,
ignore ``tools`` or insist that user and assistant alternate. Each template is probed once, and
rendering adapts a conversation to what was found (``worker/templates/adapt.py``).

Sentinels are odd enough never to be template text: a feature counts as supported only when
the sample renders without error AND the sentinel shows up in the output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.formats.base import ToolCallFormat
from worker.templates.errors import TemplateError

# ChatTemplate.render_raw: (messages, *, tools=None, add_generation_prompt=True) -> prompt text.
RenderRaw = Callable[..., str]


@dataclass(frozen=True)
class Capabilities:
    """What a template can render, found by probing it with sample conversations."""

    system_role: bool
    tool_role: bool
    tool_calls: bool
    renders_tools: bool
    strict_alternation: bool
    # Some templates concatenate ``arguments`` as a string (functionary v2.2): pass JSON text.
    tool_call_arguments_as_string: bool = False
    # Some templates add ``content`` to a string even when the turn is only calls: pass "".
    tool_call_content_empty_string: bool = False


_P_SYSTEM = "probe-system-4be1"
_P_USER = "probe-user-93c7"
_P_USER2 = "probe-user-0d5e"
_P_ASSISTANT = "probe-assistant-7a21"
_P_TOOL_NAME = "probe_tool_5e0b"
_P_ARG = "probe-argument-61d2"
_P_CALL_ID = "call_probe1"
_P_RESULT = "probe-result-2f9a"
_P_TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": _P_TOOL_NAME,
        "description": "A probe.",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    },
}

# (arguments as a JSON string, content "" rather than None) of a call turn the template renders.
_CallShape = tuple[bool, bool]


def probe_capabilities(render_raw: RenderRaw) -> Capabilities:
    system = _renders(render_raw, [{"role": "system", "content": _P_SYSTEM}, _user()], _P_SYSTEM, _P_USER)
    strict = not _renders(render_raw, [_user(), _user(_P_USER2)], _P_USER, _P_USER2)
    call_shape = _probe_call_shape(render_raw)
    return Capabilities(
        system_role=system,
        tool_role=any(_renders(render_raw, c, _P_RESULT) for c in _tool_probe_conversations(call_shape)),
        tool_calls=call_shape is not None,
        renders_tools=_probe_renders_tools(render_raw),
        strict_alternation=strict,
        tool_call_arguments_as_string=bool(call_shape and call_shape[0]),
        tool_call_content_empty_string=bool(call_shape and call_shape[1]),
    )


def probe_wraps_tool_results(render_raw: RenderRaw, caps: Capabilities, fmt: ToolCallFormat) -> bool:
    """Whether the template already puts the format's wrapper (``<tool_response>``) around
    tool content, so that passing fmt.render_tool_result(...) would wrap it twice."""
    wrapped = fmt.render_tool_result(_P_TOOL_NAME, _P_CALL_ID, _P_RESULT)
    before = wrapped.split(_P_RESULT, 1)[0].strip()
    if not before or not caps.tool_role:
        return False
    opener = before.splitlines()[0].strip()
    call_shape = (caps.tool_call_arguments_as_string, caps.tool_call_content_empty_string) if caps.tool_calls else None
    for conversation in _tool_probe_conversations(call_shape):
        try:
            out = render_raw(conversation)
        except TemplateError:
            continue
        at = out.find(_P_RESULT)
        if at >= 0:
            # Look only just before the result: the template's own wrapper sits there.
            return opener in out[max(0, at - len(before) - 64) : at]
    return False


def _renders(render_raw: RenderRaw, messages: list[dict[str, Any]], *needles: str, tools: list | None = None) -> bool:
    try:
        out = render_raw(messages, tools=tools, add_generation_prompt=True)
    except TemplateError:
        return False
    return all(n in out for n in needles)


def _probe_call_shape(render_raw: RenderRaw) -> _CallShape | None:
    """The first call shape the template renders, or None when it renders none.

    A call turn is tried followed by its result first, then by a user turn, then last: some
    templates treat the last assistant turn apart (QwQ splits ``content`` of earlier turns only,
    so a null content fails there and nowhere else).
    """
    for after in ([_probe_tool_turn()], [_user(_P_USER2)], []):
        for as_string in (False, True):
            for empty_content in (False, True):
                turn = _probe_call_turn(as_string, empty_content)
                if _renders(render_raw, [_user(), turn, *after], _P_TOOL_NAME, _P_ARG):
                    return as_string, empty_content
    return None


def _tool_probe_conversations(call_shape: _CallShape | None) -> list[list[dict[str, Any]]]:
    # A tool turn normally follows the call it answers; some templates insist on it.
    candidates = [[_user(), _assistant(), _probe_tool_turn()]]
    if call_shape is not None:
        candidates.insert(0, [_user(), _probe_call_turn(*call_shape), _probe_tool_turn()])
    return candidates


def _probe_renders_tools(render_raw: RenderRaw) -> bool:
    samples = ([_user()], [{"role": "system", "content": _P_SYSTEM}, _user()])
    return any(_renders(render_raw, list(s), _P_TOOL_NAME, tools=[_P_TOOL_SPEC]) for s in samples)


def _user(text: str = _P_USER) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str = _P_ASSISTANT) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _probe_call_turn(as_string: bool, empty_content: bool) -> dict[str, Any]:
    args: Any = {"x": _P_ARG}
    if as_string:
        args = json.dumps(args)
    call = {"id": _P_CALL_ID, "type": "function", "function": {"name": _P_TOOL_NAME, "arguments": args}}
    return {"role": "assistant", "content": "" if empty_content else None, "tool_calls": [call]}


def _probe_tool_turn(content: str = _P_RESULT) -> dict[str, Any]:
    return {"role": "tool", "content": content, "name": _P_TOOL_NAME, "tool_call_id": _P_CALL_ID}
