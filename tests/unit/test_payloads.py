"""The event payload models (toolq/wire/payloads.py) against events recorded from real jobs: SmolLM2 in a
real worker over a real Redis, every event type (tests/unit/recorded_events.jsonl, recorded with
tokens streamed, a served tool, a client tool paused and answered, ``on_client_tool`` "end", a pause
past its deadline, an over-long prompt and a cancel). Each event's data read through its model and
written back gives the very bytes the store wrote: the wire did not change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store.jobstore import _event_parts
from toolq.wire.payloads import MODELS, FinalData, RequiresActionData, TokenData, ToolCallData, payload
from toolq.wire.protocol import Event, EventType

RECORDED = [line for line in (Path(__file__).parent / "recorded_events.jsonl").read_text().splitlines() if line]


def test_the_recording_holds_every_event_type():
    assert {json.loads(line)["type"] for line in RECORDED} == {t.value for t in EventType}
    assert set(MODELS) == set(EventType)


@pytest.mark.parametrize("line", RECORDED, ids=[f"{i}-{json.loads(x)['type']}" for i, x in enumerate(RECORDED)])
def test_a_recorded_event_reads_typed_and_writes_back_byte_for_byte(line):
    event = Event.model_validate_json(line)
    data = payload(event)
    assert type(data) is MODELS[event.type] and type(data).of(event) == data
    assert data.model_extra == {}  # every key the worker writes is a declared field
    head, tail = _event_parts(event.job_id, event.type, data.to_wire(), event.ts)
    assert head + str(event.seq) + tail == line


def test_optional_keys_stay_absent_and_present_ones_stay_present():
    by_type: dict[EventType, list[Event]] = {}
    for line in RECORDED:
        event = Event.model_validate_json(line)
        by_type.setdefault(event.type, []).append(event)
    calls = [ToolCallData.of(e) for e in by_type[EventType.tool_call]]
    assert {c.awaiting for c in calls} == {None, "client"}
    assert all(("awaiting" in c.to_wire()) == (c.awaiting is not None) for c in calls)
    finals = [FinalData.of(e) for e in by_type[EventType.final]]
    assert any(f.tool_calls for f in finals) and any("tool_calls" not in f.to_wire() for f in finals)
    assert RequiresActionData.of(by_type[EventType.requires_action][0]).calls[0].kind == "client"
    assert "".join(TokenData.of(e).text for e in by_type[EventType.token])


def test_reading_an_event_as_another_type_is_refused():
    event = Event(job_id="job_1", seq=3, type=EventType.token, ts=0, data={"text": "hi"})
    with pytest.raises(ValueError, match="is token, not final"):
        FinalData.of(event)


def test_a_reader_takes_partial_and_newer_data():
    """Every field has a default, and a key this reader does not know is kept as it came."""
    event = Event(job_id="job_1", seq=9, type=EventType.final, ts=0, data={"content": "ok", "later": 1})
    final = FinalData.of(event)
    assert (final.content, final.finish_reason, final.usage.completion_tokens) == ("ok", "stop", 0)
    assert final.to_wire() == {"content": "ok", "later": 1}
