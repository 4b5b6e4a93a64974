"""The job page's waterfall (gateway/ui/waterfall.py): bars from the events' timestamps."""

from __future__ import annotations

from gateway.ui.waterfall import waterfall
from toolq.wire.protocol import Event


def ev(seq: int, type: str, ts: int, **data) -> Event:
    return Event.model_validate({"job_id": "j", "seq": seq, "type": type, "ts": ts, "data": data})


def bars(events):
    return [(s.kind, s.label, s.start_ms, s.end_ms, s.where, s.ok) for s in waterfall(events)]


def test_queue_then_two_rounds_around_a_tool():
    events = [
        ev(1, "queued", 1000, model="m"),
        ev(2, "started", 1040, worker="w1", model="m"),
        ev(3, "tool_call", 1300, id="c1", name="zorbix", iteration=1, where="worker"),
        ev(4, "tool_result", 1350, id="c1", name="zorbix", ok=True, duration_ms=45.0, where="worker"),
        ev(5, "final", 1500, content="22", iterations=2),
    ]
    assert bars(events) == [
        ("queue", "queue", 0, 40, None, None),
        ("generate", "round 1: generate", 40, 300, None, None),
        ("tool", "zorbix", 305, 350, "worker", True),
        ("generate", "round 2: generate", 350, 500, None, None),
    ]


def test_a_pause_and_its_resume_show_the_wait_on_the_caller_and_the_second_queue():
    events = [
        ev(1, "queued", 0, model="m"),
        ev(2, "started", 10, worker="w1"),
        ev(3, "tool_call", 100, id="c1", name="wire", iteration=1, where="worker", awaiting="approval"),
        ev(4, "requires_action", 101, calls=[], deadline_ms=99999),
        ev(5, "queued", 5000, attempt=2, resumed="requires_action"),
        ev(6, "started", 5020, worker="w2", attempt=2, resumed=True),
        ev(7, "tool_result", 5100, id="c1", name="wire", ok=True, duration_ms=60, where="service"),
        ev(8, "final", 5300, content="done", iterations=2),
    ]
    assert bars(events) == [
        ("queue", "queue", 0, 10, None, None),
        ("generate", "round 1: generate", 10, 100, None, None),
        ("paused", "waiting on the caller", 101, 5000, None, None),
        ("queue", "queue (resumed)", 5000, 5020, None, None),
        ("tool", "wire", 5040, 5100, "service", True),
        ("generate", "round 2: generate", 5100, 5300, None, None),
    ]


def test_a_job_cancelled_in_the_queue_is_one_queue_bar_and_results_not_run_draw_none():
    assert bars([ev(1, "queued", 0), ev(2, "cancelled", 700, reason="cancelled while queued")]) == [
        ("queue", "queue", 0, 700, None, None)
    ]
    events = [
        ev(1, "queued", 0),
        ev(2, "started", 5),
        ev(3, "tool_result", 9, id="c", name="t", ok=True, executed=False, where="worker"),
        ev(4, "error", 20, code="timeout", message="x"),
    ]
    assert bars(events) == [("queue", "queue", 0, 5, None, None), ("generate", "round 1: generate", 9, 20, None, None)]


def test_no_events_no_bars_and_events_out_of_order_are_read_by_seq():
    assert waterfall([]) == []
    events = [ev(2, "started", 30), ev(1, "queued", 0), ev(3, "final", 90)]
    assert bars(events) == [
        ("queue", "queue", 0, 30, None, None),
        ("generate", "round 1: generate", 30, 90, None, None),
    ]
