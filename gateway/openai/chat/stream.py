"""A streamed chat completion: a job's events turned into ChatCompletionChunk dicts.

The first chunk gives the role; ``token`` events give ``delta.content``, as far as
gateway/openai/visible_text.py lets them (no call markup reaches the caller as text).

Tool calls stream as the model writes them when the worker says they were generated under a
grammar that guarantees they parse (the token event's ``calls``: tool_choice required or a named
tool, or the text from a lazy grammar's trigger on; worker/formats/streaming.py): index, id and
name first, then the arguments JSON in the pieces the model wrote. Only the caller's own
functions stream; a served tool's call runs in the worker and never reaches the caller.

Any other call is sent from the final event, once the worker has checked it against its schema
(a stream cannot take back arguments it has sent, and an unchecked call may be sent back to the
model): index, id and name first, then the arguments string in pieces. A streamed call is not
sent again. The final event also adds whatever content was held back; then the finish chunk, the
usage chunk when asked, and the caller writes ``[DONE]``.

What the grammar cannot promise: a streamed call whose arguments then fail a check the grammar
does not express (a schema's ``maximum``, say) is sent back to the model by the worker, and the
stream has already shown it.
"""

from __future__ import annotations

from typing import Any

from gateway.openai.chat.shapes import FINISH, ChunkWriter, tool_calls
from gateway.openai.shared import argument_pieces
from gateway.openai.streamed_calls import StreamedCalls
from gateway.openai.visible_text import VisibleText
from toolq.wire.payloads import FinalData, TokenData
from toolq.wire.protocol import Event, EventType, JobRequest


class ChatStream:
    def __init__(self, writer: ChunkWriter, job: JobRequest):
        self.writer = writer
        self.text = VisibleText.of(job)
        self.calls = StreamedCalls(job)

    def start(self) -> dict[str, Any]:
        return self.writer.chunk({"role": "assistant", "content": ""})

    def on_event(self, event: Event) -> list[dict[str, Any]]:
        """The chunks one event makes (the terminal events are handled by ``final``)."""
        if event.type == EventType.token:
            out = []
            token = TokenData.of(event)
            shown = self.text.add_token(token)
            if shown:
                out.append(self.writer.chunk({"content": shown}))
            for piece in self.calls.read(token):
                tc: dict[str, Any] = {"index": piece.index, "function": {"arguments": piece.arguments}}
                if piece.id is not None:
                    tc = {**tc, "id": piece.id, "type": "function", "function": {"name": piece.name, **tc["function"]}}
                out.append(self.writer.chunk({"tool_calls": [tc]}))
            return out
        if event.type == EventType.tool_result:
            self.text.new_turn()
            self.calls.new_turn()
        return []

    def final(self, data: FinalData) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        rest = self.text.rest(data.content or "")
        if rest:
            out.append(self.writer.chunk({"content": rest}))
        index = len(self.calls.ids)
        for call in tool_calls(data):
            if self.calls.streamed(call["id"]) is not None:
                continue
            fn = call["function"]
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": ""},
            }
            if "toolq" in call:
                head["toolq"] = call["toolq"]  # the call's effect key
            out.append(self.writer.chunk({"tool_calls": [head]}))
            for args in argument_pieces(fn["arguments"]):
                piece = {"index": index, "function": {"arguments": args}}
                out.append(self.writer.chunk({"tool_calls": [piece]}))
            index += 1
        out.append(self.writer.chunk({}, FINISH.get(data.finish_reason, "stop")))
        if self.writer.include_usage:
            out.append(self.writer.usage_chunk(data))
        return out
