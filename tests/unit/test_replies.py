"""The model's own text of its call turns, matched to later turns by id and content
(worker/replies.py)."""

from __future__ import annotations

from toolq.protocol import Message, ToolCall
from worker.replies import MAX_CHARS, Replies


def _calls(*args: int) -> list[ToolCall]:
    return [ToolCall.model_validate({"function": {"name": "add", "arguments": {"a": a}}}) for a in args]


def _turn(calls: list[ToolCall]) -> Message:
    return Message(role="assistant", tool_calls=calls)


def test_a_turn_with_the_same_calls_gets_the_kept_text():
    calls = _calls(1, 2)
    r = Replies()
    r.keep(calls, "TEXT")
    same = [ToolCall.model_validate(c.model_dump()) for c in calls]  # as a caller sends them back
    assert r.matching([Message(role="user", content="hi"), _turn(same)]) == {calls[0].id: "TEXT"}


def test_other_calls_under_the_same_id_get_nothing():
    calls = _calls(1, 2)
    r = Replies()
    r.keep(calls, "TEXT")
    fewer = _turn([calls[0]])
    edited = _turn(
        [calls[0], ToolCall.model_validate({"id": calls[1].id, "function": {"name": "add", "arguments": {"a": 3}}})]
    )
    assert r.matching([fewer]) == {} and r.matching([edited]) == {}


def test_bounded_least_recently_used_first():
    r = Replies(max_turns=2)
    a, b, c = _calls(1), _calls(2), _calls(3)
    r.keep(a, "A")
    r.keep(b, "B")
    r.matching([_turn(a)])  # a is used: b is now the oldest
    r.keep(c, "C")
    assert len(r) == 2
    assert r.matching([_turn(a), _turn(b), _turn(c)]) == {a[0].id: "A", c[0].id: "C"}


def test_a_long_turn_or_no_calls_is_not_kept():
    r = Replies()
    r.keep(_calls(1), "x" * (MAX_CHARS + 1))
    r.keep([], "TEXT")
    assert len(r) == 0
