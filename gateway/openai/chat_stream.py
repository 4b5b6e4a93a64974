"""A streamed chat completion: a job's events turned into ChatCompletionChunk dicts.

The first chunk gives the role; ``token`` events give ``delta.content``, as far as
gateway/openai/visible_text.py lets them (no call markup reaches the caller as text). The final
event adds whatever content was held back, then each call as ``delta.tool_calls``: index, id and
name first, then the arguments string in pieces; then the finish chunk, the usage chunk when
asked, and the caller writes ``[DONE]``.

Calls are streamed from the final event, not from tokens, on purpose: the worker checks each
call against its schema and sends a failing one back to the model, and a stream cannot take back
arguments it has sent.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.openai.chat_shapes import FINISH, ChunkWriter, tool_calls
from gateway.openai.visible_text import VisibleText
from toolq.payloads import FinalData, TokenData
from toolq.protocol import Event, EventType

ARGUMENT_PIECE = 24  # characters of arguments per chunk


class ChatStream:
    def __init__(self, writer: ChunkWriter, *, tools_offered: bool):
        self.writer = writer
        self.text = VisibleText(tools_offered=tools_offered)

    def start(self) -> dict[str, Any]:
        return self.writer.chunk({"role": "assistant", "content": ""})

    def on_event(self, event: Event) -> list[dict[str, Any]]:
        """The chunks one event makes (the terminal events are handled by ``final``)."""
        if event.type == EventType.token:
            shown = self.text.add(TokenData.of(event).text)
            return [self.writer.chunk({"content": shown})] if shown else []
        if event.type == EventType.tool_result:
            self.text.new_turn()
        return []

    def final(self, data: FinalData) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        rest = self.text.rest(data.content or "")
        if rest:
            out.append(self.writer.chunk({"content": rest}))
        for i, call in enumerate(tool_calls(data)):
            fn = call["function"]
            head = {"index": i, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}
            out.append(self.writer.chunk({"tool_calls": [head]}))
            args = fn["arguments"]
            for at in range(0, len(args), ARGUMENT_PIECE):
                piece = {"index": i, "function": {"arguments": args[at : at + ARGUMENT_PIECE]}}
                out.append(self.writer.chunk({"tool_calls": [piece]}))
        out.append(self.writer.chunk({}, FINISH.get(data.finish_reason, "stop")))
        if self.writer.include_usage:
            out.append(self.writer.usage_chunk(data))
        return out


def sse_data(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
