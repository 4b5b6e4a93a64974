"""Conversation-prefix keys: one short hash per message boundary of a conversation, the same on
every side of the house.

The worker records the keys of the transcripts it ran (worker/held.py); the gateway computes the
keys of a new request and asks which live worker holds the longest of them
(store/affinity.py). A request whose messages extend an earlier job's transcript (its
messages, the assistant's answer or calls, the tool results) therefore shares that transcript's
keys up to its last message, whatever else it adds.

Key ``i`` (1-based) covers the model, the tools offered and messages ``1..i``, chained:
``k_0 = H(model, tools)``, ``k_i = H(k_{i-1}, canonical(message_i))``. The canonical form keeps
what the prompt is rendered from and drops what a caller may legitimately respell when it sends
a transcript back: ids (tool-call ids, a tool message's ``tool_call_id`` and ``name``), a tool
call's argument JSON spacing and key order (the protocol parses arguments into an object), and
surrounding whitespace of a text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from toolq.wire.protocol import JobRequest, Message

KEY_CHARS = 16  # 64 bits of sha256: collisions only cost a missed cache, never a wrong answer
MAX_BOUNDARIES = 64  # a request is matched on its last 64 boundaries; a transcript records as many


def _arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical(message: Message) -> str:
    """The text of one message that its key is taken over."""
    calls = [[c.function.name, _arguments(c.function.arguments)] for c in message.tool_calls or []]
    return json.dumps([message.role, (message.content or "").strip(), calls], ensure_ascii=False)


def _tools(tools: Sequence[Any] | None) -> str:
    if not tools:
        return "[]"
    return json.dumps(
        [t if isinstance(t, str) else t.model_dump(mode="json") for t in tools], sort_keys=True, ensure_ascii=False
    )


def _h(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:KEY_CHARS]


def prefix_keys(model: str, tools: Sequence[Any] | None, messages: Sequence[Message]) -> list[str]:
    """Key ``i`` for every boundary ``1..len(messages)``, in order."""
    k = _h("toolq-conversation-1", model, _tools(tools))
    out = []
    for m in messages:
        k = _h(k, canonical(m))
        out.append(k)
    return out


def request_keys(model: str, request: JobRequest) -> list[str]:
    """The keys a new request is matched on: its last ``MAX_BOUNDARIES`` boundaries, longest first."""
    return prefix_keys(model, request.tools, request.messages)[::-1][:MAX_BOUNDARIES]


def transcript_keys(model: str, request: JobRequest, messages: Sequence[Message]) -> list[str]:
    """The keys a worker records for a transcript it ran: its last ``MAX_BOUNDARIES`` boundaries."""
    return prefix_keys(model, request.tools, messages)[-MAX_BOUNDARIES:]
