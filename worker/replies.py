"""The model's own text of its call turns, kept so the next prompt can show a turn as written.

A chat template re-spells a call turn (``{"name":"x", ...}`` where the model wrote
``\\n{ "name": "x", ...}``), so the next round's prompt stops matching the engine's cache at the
call and everything after it is evaluated again. The loop keeps the text of a turn that parsed to
exactly that turn's calls and spells no special token; a later prompt shows it as written
wherever an assistant turn holds the same calls (same first call id, same names and arguments):
the next round of the job, or the caller's next request after client-executed calls (the
OpenAI-compatible endpoints, a resumed pause), which carries the call ids back.

The worker holds one ``Replies``; it is bounded, and matching on the calls' content as well as
their id means a turn can only ever be shown in another spelling of itself.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from toolq.protocol import Message, ToolCall

MAX_TURNS = 1024  # turns kept, least recently used dropped first
MAX_CHARS = 16_384  # a longer turn is not kept


def _content(calls: Iterable[ToolCall]) -> tuple[tuple[str, str], ...]:
    return tuple((c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls)


class Replies:
    def __init__(self, max_turns: int = MAX_TURNS):
        self.max_turns = max_turns
        self._kept: OrderedDict[str, tuple[tuple[tuple[str, str], ...], str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, calls: Sequence[ToolCall], text: str) -> None:
        """Remember ``text`` as the model's own writing of ``calls`` (one turn)."""
        if not calls or len(text) > MAX_CHARS:
            return
        self._kept[calls[0].id] = (_content(calls), text)
        self._kept.move_to_end(calls[0].id)
        while len(self._kept) > self.max_turns:
            self._kept.popitem(last=False)

    def matching(self, messages: Iterable[Message]) -> Mapping[str, str]:
        """First call id -> kept text, for each assistant turn of ``messages`` that holds exactly
        the calls a kept text was written for."""
        out: dict[str, str] = {}
        for m in messages:
            if m.role != "assistant" or not m.tool_calls:
                continue
            kept = self._kept.get(m.tool_calls[0].id)
            if kept is not None and kept[0] == _content(m.tool_calls):
                out[m.tool_calls[0].id] = kept[1]
                self._kept.move_to_end(m.tool_calls[0].id)
        return out
