"""A response's stream events (openai.types.responses.ResponseStreamEvent) from its job's events.

The translation is a pure function of the job's event log, read from its first event every time,
so ``sequence_number`` (0, 1, 2 ...) is the same on every read: a client that lost its stream
resumes with ``GET /v1/responses/{id}?stream=true&starting_after=N`` and gets exactly the events
after N. Text streams as ``response.output_text.delta`` as far as gateway/openai/visible_text.py
lets it; the final event closes the message and adds each function call (added, arguments in
pieces, done); ``response.completed`` / ``incomplete`` / ``failed`` ends the stream. A cancelled
job ends it with ``response.failed`` carrying status ``cancelled`` (the API has no cancelled event).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.openai.responses_shapes import (
    call_item,
    error_of,
    message_item,
    output_of,
    response_object,
    usage_of,
)
from gateway.openai.responses_store import StoredResponse
from gateway.openai.visible_text import VisibleText
from toolq.payloads import ErrorData, FinalData, TokenData
from toolq.protocol import Event, EventType

ARGUMENT_PIECE = 24  # characters of arguments per delta event


class ResponseEvents:
    def __init__(self, stored: StoredResponse, *, tools_offered: bool):
        self.stored = stored
        self.text = VisibleText(tools_offered=tools_offered)
        self.seq = -1
        self.message = ""  # the message text streamed so far
        self.message_open = False
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
            return self._text(self.text.add(TokenData.of(event).text))
        if t == EventType.tool_result:
            self.text.new_turn()
            return []
        if t == EventType.final:
            return self._final(FinalData.of(event), event.ts // 1000)
        if t in (EventType.error, EventType.cancelled):
            status = "failed" if t == EventType.error else "cancelled"
            error = error_of(ErrorData.of(event)) if t == EventType.error else None
            return [self._ev("response.failed", response=response_object(self.stored, status, error=error))]
        return []

    def _text(self, shown: str) -> list[dict[str, Any]]:
        if not shown:
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
        index = 0
        if self.message_open:
            item = message_item(self.stored.job_id, self.message, "completed")
            part = item["content"][0]
            out += [
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
            index = 1
        for call in data.tool_calls or ():
            done = call_item(call, "completed")
            args = done["arguments"]
            out.append(
                self._ev("response.output_item.added", output_index=index, item=call_item(call, "in_progress", ""))
            )
            for at in range(0, len(args), ARGUMENT_PIECE):
                out.append(
                    self._ev(
                        "response.function_call_arguments.delta",
                        item_id=done["id"],
                        output_index=index,
                        delta=args[at : at + ARGUMENT_PIECE],
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


def sse_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
