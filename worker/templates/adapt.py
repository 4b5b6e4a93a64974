"""Role adaptation: protocol messages turned into message dicts a given template can render.

What the template lacks (see ``Capabilities``) is made up for here: tool instructions go into the
system prompt (or the first user turn), calls are written inline in the tool-call format's own
syntax, results become user turns, same-role turns are merged. Every string that came from a
message is marked untrusted (``worker/templates/markers.py``) on the way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from toolq.wire.protocol import FunctionCall, Message, ToolCall
from worker.formats.base import ToolCallFormat, ToolDefinition
from worker.templates.markers import checked_markup, clean, clean_json, mark, mark_json, mark_spec
from worker.templates.probe import Capabilities


class Adapter:
    """Turns protocol messages into marked message dicts a template can render, knowing two facts
    of it: what it can render (``caps``), and whether it wraps a tool result in the format's own
    markup itself (``wraps_results``, ``ChatTemplate.wraps_tool_results``)."""

    def __init__(
        self,
        caps: Capabilities,
        wraps_results: bool,
        fmt: ToolCallFormat,
        tools: list[ToolDefinition],
        variant: str | None,
    ):
        self.caps = caps
        self.wraps_results = wraps_results
        self.fmt = fmt
        self.tools = tools
        self.variant = variant

    def adapt(self, messages: list[Message]) -> list[dict[str, Any]]:
        names = _call_names(messages)
        leading, rest = _split_leading_system(messages)
        turns = [self._turn(m, names) for m in rest]
        turns = self._place_system(self._system_text(leading), turns)
        if self.caps.strict_alternation:
            turns = _merge_same_roles(turns)
        return turns

    # -- system prompt

    def _system_text(self, leading: list[Message]) -> str:
        """Tool instructions first (the same for every job with these tools, so the prompt
        prefix stays reusable across jobs), then the conversation's own system text."""
        parts = []
        if self.tools and not self.caps.renders_tools:
            # the format's instructions are markup; the tools' descriptions and schemas in them are not
            plain = clean(self.fmt.system_prompt(self.tools, self.variant))
            parts.append(checked_markup(self.fmt.system_prompt(mark_spec(self.tools), self.variant), plain))
        parts.extend(mark(m.content or "") for m in leading)
        return "\n\n".join(p for p in parts if p.strip())

    def _place_system(self, system: str, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not system:
            return turns
        if self.caps.system_role:
            return [{"role": "system", "content": system}, *turns]
        # No system role: the text opens the first user turn (one is made if the chat has none).
        if turns and turns[0]["role"] == "user":
            first = dict(turns[0], content=_join(system, turns[0]["content"]))
            return [first, *turns[1:]]
        return [{"role": "user", "content": system}, *turns]

    # -- one message

    def _turn(self, m: Message, names: dict[str, str]) -> dict[str, Any]:
        if m.role == "assistant":
            return self._assistant_turn(m)
        if m.role == "tool":
            return self._tool_turn(m, names)
        # A system message after the start: kept where the template can take it mid-chat.
        role = m.role
        if role == "system" and (not self.caps.system_role or self.caps.strict_alternation):
            role = "user"
        return {"role": role, "content": mark(m.content or "")}

    def _assistant_turn(self, m: Message) -> dict[str, Any]:
        content = mark(m.content) if m.content is not None else None
        if not m.tool_calls:
            return {"role": "assistant", "content": self._final_text(m.content or "")}
        if not self.caps.tool_calls:
            return {"role": "assistant", "content": _join(content or "", self._inline_calls(m.tool_calls), "\n")}
        if content is None and self.caps.tool_call_content_empty_string:
            content = ""
        return {"role": "assistant", "content": content, "tool_calls": [self._call_dict(c) for c in m.tool_calls]}

    def _final_text(self, content: str) -> str:
        """An answer as the format would have the model write it. Styles where even answers are
        structured (thoughtful_steps: a JSON "result") offer ``render_final``; showing earlier
        answers that way keeps the transcript consistent with what the grammar asks for."""
        render_final = getattr(self.fmt, "render_final", None)
        if render_final is None or not content.strip():
            return mark(content)
        return checked_markup(render_final(mark(content)), render_final(clean(content)))

    def _call_dict(self, call: ToolCall) -> dict[str, Any]:
        args = mark_json(call.arguments)
        if self.caps.tool_call_arguments_as_string:
            args = json.dumps(args, ensure_ascii=False)  # markers are not ASCII: they survive
        return {"id": mark(call.id), "type": "function", "function": {"name": mark(call.name), "arguments": args}}

    def _inline_calls(self, calls: Sequence[ToolCall]) -> str:
        """The calls in the format's own syntax: its markup trusted, names and values not."""
        plain = self.fmt.render_tool_calls([_copy_call(c, clean, clean_json) for c in calls])
        marked = self.fmt.render_tool_calls([_copy_call(c, mark, mark_json) for c in calls])
        return checked_markup(marked, plain)

    def _tool_turn(self, m: Message, names: dict[str, str]) -> dict[str, Any]:
        name = m.name or names.get(m.tool_call_id or "", "") or "tool"
        call_id = m.tool_call_id or ""
        if self.caps.tool_role:
            content = mark(m.content or "") if self.wraps_results else self._result_text(name, call_id, m.content or "")
            return {"role": "tool", "content": content, "name": mark(name), "tool_call_id": mark(call_id)}
        return {"role": "user", "content": self._result_text(name, call_id, m.content or "")}

    def _result_text(self, name: str, call_id: str, content: str) -> str:
        plain = self.fmt.render_tool_result(clean(name), clean(call_id), clean(content))
        marked = self.fmt.render_tool_result(mark(name), mark(call_id), mark(content))
        return checked_markup(marked, plain)


def _copy_call(call: ToolCall, text: Callable[[str], str], obj: Callable[[Any], Any]) -> ToolCall:
    """A ToolCall with its strings passed through text/obj; model_construct because markers may
    push a name past the protocol's length limit and this copy is never sent anywhere."""
    function = FunctionCall.model_construct(name=text(call.name), arguments=obj(call.arguments))
    return ToolCall.model_construct(id=text(call.id), type="function", function=function)


def _call_names(messages: Iterable[Message]) -> dict[str, str]:
    """call id -> tool name, so a tool message without a name can still be labelled."""
    return {c.id: c.name for m in messages for c in (m.tool_calls or ())}


def _split_leading_system(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return messages[:n], messages[n:]


def _join(first: str | None, second: str | None, sep: str = "\n\n") -> str:
    return sep.join(p for p in (first, second) if p)


def _merge_same_roles(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive same-role turns, for templates that raise on anything but alternation
    (two tool results in a row became two user turns)."""
    merged: list[dict[str, Any]] = []
    for turn in turns:
        if merged and merged[-1]["role"] == turn["role"]:
            prev = merged[-1]
            combined = dict(prev, content=_join(prev.get("content"), turn.get("content")))
            calls = (prev.get("tool_calls") or []) + (turn.get("tool_calls") or [])
            if calls:
                combined["tool_calls"] = calls
            merged[-1] = combined
        else:
            merged.append(turn)
    return merged
