"""The tool-service wire codecs: calls read from a stream entry, outcomes posted back, and the
fleet entries of instances. Everything that arrives from Redis is untrusted."""

from __future__ import annotations

import json

from store.services import ServiceFleet, ServiceInfo
from toolq.services.calls import MAX_RESULT_CHARS, ServiceCall, decode_outcome, encode_outcome
from toolq.tools import ToolOutcome
from worker.sources.services import _schema_tool


def test_a_call_is_read_from_its_entry_with_a_deadline_on_redis_clock():
    call = ServiceCall.from_entry(
        b"1700000000000-3", {b"call_id": b"call_1", b"arguments": b'{"a": 1}', b"timeout_ms": b"2500"}
    )
    assert call == ServiceCall("1700000000000-3", "call_1", {"a": 1}, 2500)
    assert call.deadline_ms == 1700000002500


def test_malformed_entries_are_not_calls():
    good = {b"call_id": b"c", b"arguments": b"{}", b"timeout_ms": b"1"}
    assert ServiceCall.from_entry("1-0", {**good, b"arguments": b"[1]"}) is None  # not an object
    assert ServiceCall.from_entry("1-0", {**good, b"arguments": b"{"}) is None
    assert ServiceCall.from_entry("1-0", {**good, b"timeout_ms": b"soon"}) is None
    assert ServiceCall.from_entry("x-0", good) is None
    assert ServiceCall.from_entry("1-0", {b"call_id": b"c"}) is None


def test_outcomes_round_trip_and_bad_payloads_read_as_the_service_s_fault():
    out = decode_outcome("t", encode_outcome(ToolOutcome(False, "boom", "boom", 3.0)), 7.0)
    assert out == ToolOutcome(False, "boom", "boom", 7.0)
    for payload in (b"not json", json.dumps({"ok": "yes", "content": "x"}), json.dumps({"content": "x"})):
        bad = decode_outcome("t", payload, 1.0)
        assert not bad.ok and bad.content.startswith("tool service 't' sent a malformed result")
    long = decode_outcome("t", json.dumps({"ok": True, "content": "x" * (MAX_RESULT_CHARS + 10)}), 1.0)
    assert long.ok and long.content.endswith(f"[cut: the result was {MAX_RESULT_CHARS + 10} characters]")


def spec(name: str, parameters: object = None, **extra: object) -> dict:
    fn = {"name": name, "description": "d", "parameters": parameters or {"type": "object", "properties": {}}}
    return {"type": "function", "function": fn, "where": "service", **extra}


def test_the_service_fleet_keeps_the_spec_of_the_instance_that_beat_last():
    old = ServiceInfo("a", (spec("t", requires_approval=False),), heartbeat_ms=1)
    new = ServiceInfo("b", (spec("t", requires_approval=True), spec("u")), heartbeat_ms=2)
    services = ServiceFleet((new, old))
    assert services.tools()["t"]["requires_approval"] is True
    assert services.serves("u") and not services.serves("v")
    assert [i.id for i in services.instances_of("t")] == ["b", "a"]
    assert ServiceInfo.from_hash({k.encode(): str(v).encode() for k, v in new.to_hash().items()}) == new
    assert ServiceInfo.from_hash({b"tools": b"[]"}) is None  # no id: a half-written hash


def test_a_worker_ignores_a_registered_tool_it_could_not_check_calls_against():
    assert _schema_tool(spec("bad name!")) is None
    assert _schema_tool(spec("t", {"type": "array"})) is None
    assert _schema_tool(spec("t", {"type": "object", "properties": {"a": {"type": 5}}})) is None
    made = _schema_tool(spec("t", requires_approval=True, timeout_s=2))
    assert made is not None and made.requires_approval and made.timeout_s == 2.0
