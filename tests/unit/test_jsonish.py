"""Lenient JSON reading: repairs happen between strings, never inside them."""

from __future__ import annotations

import pytest

from worker import jsonish


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"q": "True story"}', {"q": "True story"}),
        ('{"q": "a, }b"}', {"q": "a, }b"}),
        ('{"url": "http://x.y/a?b=1,c:2"}', {"url": "http://x.y/a?b=1,c:2"}),
        ("{'q': \"what's up\"}", {"q": "what's up"}),
        ('{"who": "AT&amp;T"}', {"who": "AT&amp;T"}),
        ('{"q": "None of, ]these"}', {"q": "None of, ]these"}),
    ],
)
def test_string_contents_come_through_byte_for_byte(text, expected):
    assert jsonish.loads(text) == expected


def test_python_literals():
    assert jsonish.loads("{'a': True, 'b': None, 'c': False}") == {"a": True, "b": None, "c": False}


def test_python_literal_tuple_becomes_list():
    assert jsonish.loads("{'a': (1, 2)}") == {"a": [1, 2]}


def test_json_words_inside_a_python_literal():
    # A mix models do write: single quotes with JSON's true/null.
    assert jsonish.loads("{'a': true, 'b': null, 'c': 'true'}") == {"a": True, "b": None, "c": "true"}


def test_trailing_commas_outside_strings_only():
    assert jsonish.loads('{"a": [1, 2,], "b": "x,}",}') == {"a": [1, 2], "b": "x,}"}


def test_raw_newline_inside_string_is_accepted():
    assert jsonish.loads('{"text": "line1\nline2"}') == {"text": "line1\nline2"}


def test_non_json_python_types_are_refused():
    with pytest.raises(jsonish.JsonishError):
        jsonish.loads("{1, 2}")  # a set
    with pytest.raises(jsonish.JsonishError):
        jsonish.loads("{1: 'a'}")  # a non-string key


def test_error_message_is_the_strict_parsers():
    with pytest.raises(jsonish.JsonishError) as e:
        jsonish.loads('{"a": 1 "b": 2}')
    assert "Expecting ',' delimiter" in str(e.value)
    assert "line 1 column" in str(e.value)


def test_empty_text_is_an_error():
    with pytest.raises(jsonish.JsonishError, match="empty"):
        jsonish.loads("   ")


def test_code_is_never_evaluated():
    with pytest.raises(jsonish.JsonishError):
        jsonish.loads("__import__('os').system('true')")


def test_huge_integer_literal_does_not_escape_as_other_error():
    with pytest.raises(jsonish.JsonishError):
        jsonish.loads("{'a': " + "9" * 5000 + ", }")


def test_scan_ignores_brackets_and_tags_inside_strings():
    text = '{"a": "} </tool_call> {", "b": [1, {"c": "]"}]} tail'
    scan = jsonish.scan_value(text, 0, stops=("</tool_call>",))
    assert scan.complete and text[: scan.end].endswith("]}")
    assert text[scan.end :] == " tail"


def test_scan_handles_escaped_quotes():
    text = r'{"a": "say \"}\" now"} x'
    scan = jsonish.scan_value(text, 0)
    assert text[scan.end :] == " x"


def test_scan_stops_at_a_tag_outside_strings():
    text = '{"name": "a", "arguments": {"x": 1}</tool_call>'
    scan = jsonish.scan_value(text, 0, stops=("</tool_call>",))
    assert not scan.complete
    assert text[scan.stopped_at :] == "</tool_call>"


def test_scan_of_truncated_value():
    scan = jsonish.scan_value('{"a": "unfinished', 0)
    assert not scan.complete and scan.stopped_at is None


@pytest.mark.parametrize(
    "text, inner",
    [
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```\n{"a": 1}```', '{"a": 1}'),
        ('  {"a": 1}  ', '{"a": 1}'),
    ],
)
def test_strip_fence(text, inner):
    assert jsonish.strip_fence(text) == inner


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": 1e999}', "{'a': 1e999}"])
def test_non_finite_numbers_are_refused(text):
    # They would not survive the trip over the wire as JSON.
    with pytest.raises(jsonish.JsonishError):
        jsonish.loads(text)
