"""What each event carries in its ``data``: one model per event type, the protocol's typed view of
``Event.data``.

The worker and the store build events from these (worker/events.py, store/jobstore.py);
the gateway, the SDK and the console read them with ``Model.of(event)`` (this event's data, of this
type) or ``payload(event)`` (whichever type it is). The JSON on the wire is what it was when the
data was a plain dict: ``to_wire()`` writes exactly the keys that were given, so a key that is
sometimes absent (``awaiting``, a final's ``tool_calls``) stays absent, and a recorded event reads
and writes back unchanged (tests/unit/test_payloads.py). Every field has a default, so a reader
never fails on an event written by an older or newer party; unknown keys are kept.
"""

from __future__ import annotations

import builtins
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from toolq.wire.protocol import AttemptEnd, Event, EventType, FinishReason, PendingAction, ToolCall, Usage, Where

__all__ = [
    "MODELS",
    "CancelledData",
    "ErrorData",
    "EventData",
    "FinalData",
    "QueuedData",
    "RequiresActionData",
    "StartedData",
    "TokenData",
    "ToolCallData",
    "ToolResultData",
    "payload",
]


D = TypeVar("D", bound="EventData")


class EventData(BaseModel):
    """The data of one event type."""

    model_config = ConfigDict(extra="allow")
    type: ClassVar[EventType]

    @classmethod
    def of(cls: builtins.type[D], event: Event) -> D:  # builtins: ``type`` is the event type here
        """This event's data; ValueError when the event is of another type."""
        if event.type is not cls.type:
            raise ValueError(f"event {event.seq} of job {event.job_id} is {event.type.value}, not {cls.type.value}")
        return cls.model_validate(event.data)

    def to_wire(self) -> dict[str, Any]:
        """The event's ``data`` as it goes on the wire: the keys given, no others."""
        return self.model_dump(mode="json", include=set(self.model_fields_set))


class QueuedData(EventData):
    """The job is in its model's queue: on submit (with ``model``), and again on each resume."""

    type = EventType.queued
    model: str | None = None
    attempt: int = 1
    resumed: str | None = None  # why it was queued again ("requires_action": its caller answered)
    # Only while no worker serves its (declared) model: workers 0, and the jobs waiting, this one
    # included, for the first worker to start (store/fleet.py).
    workers: int | None = None
    waiting: int | None = None


class StartedData(EventData):
    type = EventType.started
    attempt: int = 1
    worker: str = ""
    model: str = ""
    resumed: bool = False  # from a checkpoint, or a later attempt


class CallDeltaData(BaseModel):
    """One piece of a call the model is writing under a grammar that guarantees it parses
    (worker/formats/streaming.py): a call's first piece has ``id`` and ``name``; every piece may
    carry a piece of the arguments JSON. ``index`` counts the calls of one turn."""

    model_config = ConfigDict(extra="allow")
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class TokenData(EventData):
    """Generated text (with ``stream_tokens``), coalesced: one event per flush, not per token.
    With a format that reads its turn as it is written, also ``content`` (the answer text that may
    be shown) and ``calls`` (call deltas); a reader that knows only ``text`` reads it as before."""

    type = EventType.token
    text: str = ""
    content: str | None = None
    calls: list[CallDeltaData] | None = None

    def to_wire(self) -> dict[str, Any]:
        # a call delta's id and name are on the wire only in its first piece
        return self.model_dump(mode="json", include=set(self.model_fields_set), exclude_none=True)


class ToolCallData(EventData):
    type = EventType.tool_call
    id: str = ""
    name: str = ""
    arguments: Any = Field(default_factory=dict)  # the call's arguments as the model wrote them
    iteration: int = 0
    where: Where = "worker"
    awaiting: str | None = None  # present when the job pauses for it: "client" or "approval"
    # the key an effect of the call goes by, the same on every attempt (toolq/tools/effects.py)
    effect_key: str | None = None


class ToolResultData(EventData):
    type = EventType.tool_result
    id: str = ""
    name: str = ""
    ok: bool = False
    content: str = ""
    error: str | None = None
    duration_ms: float | None = None
    executed: bool = True  # False: a result from before a resume, not run again
    where: Where = "worker"
    effect_key: str | None = None
    # present (true) when a lost attempt left the call's outcome unknown and it was not run again
    # (a tool not declared idempotent): it may or may not have taken effect
    outcome_unknown: bool | None = None
    # present (true) when the call was run again under its effect key after a lost attempt
    rerun: bool | None = None


class RequiresActionData(EventData):
    """The job paused: the calls it waits on, until ``deadline_ms`` (unix ms)."""

    type = EventType.requires_action
    calls: list[PendingAction] = Field(default_factory=list)
    deadline_ms: int = 0


class FinalData(EventData):
    type = EventType.final
    content: str | None = None
    finish_reason: FinishReason = "stop"
    iterations: int = 0
    usage: Usage = Field(default_factory=Usage)
    tool_calls: list[ToolCall] | None = None  # present with finish_reason "tool_calls"
    effect_keys: dict[str, str] | None = None  # with tool_calls: call id -> its effect key


class ErrorData(EventData):
    type = EventType.error
    code: str = "internal"  # an ErrorCode's value; a str so that a code newer than this reader still reads
    message: str = ""
    usage: Usage | None = None  # with budget_exceeded: the tokens the job used
    attempts: list[AttemptEnd] | None = None  # with worker_lost: each attempt's worker and how it ended


class CancelledData(EventData):
    type = EventType.cancelled
    reason: str = ""


# The model of each event type.
MODELS: dict[EventType, type[EventData]] = {
    m.type: m
    for m in (
        QueuedData,
        StartedData,
        TokenData,
        ToolCallData,
        ToolResultData,
        RequiresActionData,
        FinalData,
        ErrorData,
        CancelledData,
    )
}


def payload(event: Event) -> EventData:
    """The event's data as the model of its type."""
    return MODELS[event.type].model_validate(event.data)
