"""Reading the conversation so far: which calls were answered, which were left, which repeat."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolq.wire.protocol import Message, ToolCall


def call_signature(name: str, arguments: dict[str, Any]) -> str:
    """One string per (name, arguments), whatever the order of the keys."""
    return name + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


def earlier_results(messages: Sequence[Message]) -> dict[str, str]:
    """Signature of each call already answered in the transcript -> its result."""
    results = {m.tool_call_id: m.content or "" for m in messages if m.role == "tool" and m.tool_call_id}
    out: dict[str, str] = {}
    for m in messages:
        for c in m.tool_calls or ():
            if c.id in results:
                out[call_signature(c.name, c.arguments)] = results[c.id]
    return out


def without_repeats(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """A call repeated verbatim within one turn is a stutter (small models loop on a call until
    max_tokens); keep the first."""
    seen: set[str] = set()
    out = []
    for c in calls:
        sig = call_signature(c.name, c.arguments)
        if sig not in seen:
            seen.add(sig)
            out.append(c)
    return out


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Calls of the last assistant turn that have no result yet (a job resumed mid-turn)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant":
            answered = {x.tool_call_id for x in messages[i + 1 :] if x.role == "tool"}
            return [c for c in m.tool_calls or () if c.id not in answered]
        if m.role != "tool":
            return []
    return []
