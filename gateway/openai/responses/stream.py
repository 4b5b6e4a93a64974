"""A response's stream events (openai.types.responses.ResponseStreamEvent) from its job's events.

The translation is a pure function of the job's event log, read from its first event every time,
so ``sequence_number`` (0, 1, 2 ...) is the same on every read: a client that lost its stream
resumes with ``GET /v1/responses/{id}?stream=true&starting_after=N`` and gets exactly the events
after N. Text streams as ``response.output_text.delta`` as far as gateway/openai/visible_text.py
lets it. A function call the worker wrote under a grammar that guarantees it parses streams as it
is written (gateway/openai/streamed_calls.py): the message is closed, the call is added and its
arguments arrive in the model's pieces; the final event completes it. Every other call is added
by the final event once checked (added, arguments in pieces, done), after the message is closed;
``response.completed`` / ``incomplete`` / ``failed`` ends the stream. A cancelled
job ends it with ``response.failed`` carrying status ``cancelled`` (the API has no cancelled event).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.openai.responses.shapes import (
    call_item,
    error_of,
    message_item,
    output_of,
    response_object,
    usage_of,
)
from gateway.openai.responses.store import StoredResponse
from gateway.openai.shared import argument_pieces
from gateway.openai.streamed_calls import StreamedCalls
from gateway.openai.visible_text import VisibleText
from toolq.wire.payloads import ErrorData, FinalData, TokenData
from toolq.wire.protocol import Event, EventType, FunctionCall, JobRequest, ToolCall


class ResponseEvents:
    def __init__(self, stored: StoredResponse, job: JobRequest):
        self.stored = stored
        self.text = VisibleText.of(job)
        self.calls = StreamedCalls(job)
        self.streamed: dict[int, dict[str, Any]] = {}  # the stream's call index -> its item, in progress
        self.seq = -1
        self.message = ""  # the message text streamed so far
        self.message_open = False
        self.message_done = False  # closed early: a streamed call follows it
        self.msg_id = message_item(stored.job_id, "", "in_progress")["id"]

    def _ev(self, type: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": type, "sequence_number": self.seq, **fields}

    def on_event(self, event: Event) -> list[dict[str, Any]]:
        t = event.type
        if t == EventType.queued:
            return [
                self._ev("response.created", response=response_object(self.stored, "queued")),
                self._ev("response.queued", response=response_object(self.stored, "queued")),
            ]
        if t == EventType.started:
            return [self._ev("response.in_progress", response=response_object(self.stored, "in_progress"))]
        if t == EventType.token:
            token = TokenData.of(event)
            return self._text(self.text.add_token(token)) + self._calls(token)
        if t == EventType.tool_result:
            self.text.new_turn()
            self.calls.new_turn()
            return []
        if t == EventType.final:
            return self._final(FinalData.of(event), event.ts // 1000)
        if t in (EventType.error, EventType.cancelled):
            status = "failed" if t == EventType.error else "cancelled"
            error = error_of(ErrorData.of(event)) if t == EventType.error else None
            return [self._ev("response.failed", response=response_object(self.stored, status, error=error))]
        return []

    def _calls(self, data: TokenData) -> list[dict[str, Any]]:
        out = []
        for piece in self.calls.read(data):
            index = piece.index + (1 if self.message_open else 0)
            if piece.id is not None:
                out += self._close_message()
                call = ToolCall(id=piece.id, function=FunctionCall(name=piece.name or "", arguments={}))
                item = call_item(call, "in_progress", "")
                self.streamed[piece.index] = item
                out.append(self._ev("response.output_item.added", output_index=index, item=item))
            if piece.arguments:
                item = self.streamed[piece.index]
                item["arguments"] += piece.arguments
                out.append(
                    self._ev(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=piece.arguments,
                    )
                )
        return out

    def _close_message(self) -> list[dict[str, Any]]:
        if not self.message_open or self.message_done:
            return []
        self.message_done = True
        item = message_item(self.stored.job_id, self.message, "completed")
        part = item["content"][0]
        return [
            self._ev(
                "response.output_text.done",
                item_id=self.msg_id,
                output_index=0,
                content_index=0,
                text=self.message,
                logprobs=[],
            ),
            self._ev("response.content_part.done", item_id=self.msg_id, output_index=0, content_index=0, part=part),
            self._ev("response.output_item.done", output_index=0, item=item),
        ]

    def _text(self, shown: str) -> list[dict[str, Any]]:
        if not shown or self.message_done or (self.streamed and not self.message_open):
            return []
        out = []
        if not self.message_open:
            self.message_open = True
            item = message_item(self.stored.job_id, "", "in_progress")
            item["content"] = []
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += [
                self._ev("response.output_item.added", output_index=0, item=item),
                self._ev(
                    "response.content_part.added", item_id=self.msg_id, output_index=0, content_index=0, part=part
                ),
            ]
        self.message += shown
        out.append(
            self._ev(
                "response.output_text.delta",
                item_id=self.msg_id,
                output_index=0,
                content_index=0,
                delta=shown,
                logprobs=[],
            )
        )
        return out

    def _final(self, data: FinalData, at_s: int) -> list[dict[str, Any]]:
        out = self._text(self.text.rest(data.content or ""))
        out += self._close_message()
        first = 1 if self.message_open else 0
        index = first + len(self.calls.ids)
        for call in data.tool_calls or ():
            done = call_item(call, "completed")
            args = done["arguments"]
            at = self.calls.streamed(call.id)
            if at is not None:  # streamed as it was written: complete it with what was streamed
                raw = self.streamed[at]["arguments"]
                if _same_json(raw, args):
                    done, args = {**done, "arguments": raw}, raw
                out += [
                    self._ev(
                        "response.function_call_arguments.done",
                        item_id=done["id"],
                        output_index=first + at,
                        name=done["name"],
                        arguments=args,
                    ),
                    self._ev("response.output_item.done", output_index=first + at, item=done),
                ]
                continue
            out.append(
                self._ev("response.output_item.added", output_index=index, item=call_item(call, "in_progress", ""))
            )
            for piece in argument_pieces(args):
                out.append(
                    self._ev(
                        "response.function_call_arguments.delta", item_id=done["id"], output_index=index, delta=piece
                    )
                )
            out += [
                self._ev(
                    "response.function_call_arguments.done",
                    item_id=done["id"],
                    output_index=index,
                    name=done["name"],
                    arguments=args,
                ),
                self._ev("response.output_item.done", output_index=index, item=done),
            ]
            index += 1
        incomplete = data.finish_reason == "length"
        response = response_object(
            self.stored,
            "incomplete" if incomplete else "completed",
            output=output_of(self.stored.job_id, data),
            usage=usage_of(data),
            completed_at=None if incomplete else at_s,
        )
        out.append(self._ev("response.incomplete" if incomplete else "response.completed", response=response))
        return out


def _same_json(a: str, b: str) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return False
