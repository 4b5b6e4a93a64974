"""A streamed chat completion: a job's events turned into ChatCompletionChunk dicts.

- the first chunk gives the role; ``token`` events give ``delta.content``;
- with tools offered, a turn's text is streamed up to the first character that can open a tool
  call in any of toolq's formats (``<``, ``[`` or ``{``: ``<tool_call>``, ``[TOOL_CALLS]``, a bare
  JSON reply) and the rest of the turn waits for the final event, which says what was content and
  what was calls, so call markup never reaches the caller as text. A tool result (server tools)
  starts a new turn;
- the final event adds whatever content was held back, then each call as ``delta.tool_calls``:
  index, id and name first, then the arguments string in pieces; then the finish chunk, the usage
  chunk when asked, and the caller writes ``[DONE]``.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.openai.chat_shapes import FINISH, ChunkWriter, tool_calls
from toolq.protocol import Event, EventType

HOLD = "<[{"  # a tool call can start at any of these
ARGUMENT_PIECE = 24  # characters of arguments per chunk


class ChatStream:
    def __init__(self, writer: ChunkWriter, *, tools_offered: bool):
        self.writer = writer
        self.hold = tools_offered
        self.turn = ""  # the text of the turn so far
        self.sent = 0  # how much of it went out as content

    def start(self) -> dict[str, Any]:
        return self.writer.chunk({"role": "assistant", "content": ""})

    def on_event(self, event: Event) -> list[dict[str, Any]]:
        """The chunks one event makes (the terminal events are handled by ``final``)."""
        if event.type == EventType.token:
            self.turn += str(event.data.get("text", ""))
            return self._content(self._visible_end())
        if event.type == EventType.tool_result:
            self.turn, self.sent = "", 0
        return []

    def final(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        content = str(data.get("content") or "")
        sent = self.turn[: self.sent]
        if content.startswith(sent) and len(content) > len(sent):
            out.append(self.writer.chunk({"content": content[len(sent) :]}))
        for i, call in enumerate(tool_calls(data)):
            fn = call["function"]
            head = {"index": i, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}
            out.append(self.writer.chunk({"tool_calls": [head]}))
            args = fn["arguments"]
            for at in range(0, len(args), ARGUMENT_PIECE):
                piece = {"index": i, "function": {"arguments": args[at : at + ARGUMENT_PIECE]}}
                out.append(self.writer.chunk({"tool_calls": [piece]}))
        out.append(self.writer.chunk({}, FINISH.get(str(data.get("finish_reason")), "stop")))
        if self.writer.include_usage:
            out.append(self.writer.usage_chunk(data))
        return out

    def _visible_end(self) -> int:
        if not self.hold:
            return len(self.turn)
        cut = [i for i in (self.turn.find(c) for c in HOLD) if i >= 0]
        return min(cut) if cut else len(self.turn)

    def _content(self, end: int) -> list[dict[str, Any]]:
        if end <= self.sent:
            return []
        text, self.sent = self.turn[self.sent : end], end
        return [self.writer.chunk({"content": text})]


def sse_data(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
