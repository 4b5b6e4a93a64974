"""Streaming extraction, per format: what a format tells from the text so far (answer text, and
the calls begun: name, then argument pieces), as worker/formats/streaming.py reads it."""

from __future__ import annotations

import json

import pytest

from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats import FORMATS, ToolCallFormat, get_format
from worker.formats.streaming import Guarantee, TurnDelta, TurnReader

NAMES = {"get_weather", "calculate_zorbix"}
CALLS = [
    ToolCall(function=FunctionCall(name="get_weather", arguments={"city": "Paris", "days": 3})),
    ToolCall(function=FunctionCall(name="calculate_zorbix", arguments={"zorb": 15, "bix": 7})),
]


def read(fmt_name: str, text: str, guarantee: Guarantee, step: int = 1) -> tuple[TurnReader, TurnDelta]:
    """Feed ``text`` ``step`` characters at a time; everything the reader said, coalesced."""
    fmt = get_format(fmt_name)
    reader = TurnReader(fmt, tool_names=NAMES, guarantee=guarantee, trigger=fmt.trigger)
    out = TurnDelta()
    for at in range(0, len(text), step):
        out.add(reader.feed(text[at : at + step]))
    return reader, out


def assembled(delta: TurnDelta) -> dict[int, list[str]]:
    """index -> [id, name, arguments], as an OpenAI client puts the deltas together."""
    calls: dict[int, list[str]] = {}
    for d in delta.calls:
        if d.id is not None:
            assert d.index not in calls, "a call announced twice"
            assert d.index == len(calls), "indexes count up from 0 in order"
            calls[d.index] = [d.id, d.name or "", d.arguments]
        else:
            calls[d.index][2] += d.arguments
    return calls


@pytest.mark.parametrize("fmt_name", sorted(FORMATS))
@pytest.mark.parametrize("step", [1, 7])
def test_every_format_streams_grammar_written_calls(fmt_name, step):
    """Under a required grammar, every registered format streams each call: its id and name
    first, then arguments that put together are the call's arguments, ids as the parser gets."""
    fmt = get_format(fmt_name)
    text = fmt.render_tool_calls(CALLS)
    reader, out = read(fmt_name, text, "all", step)
    calls = assembled(out)
    parsed = fmt.parse(text, NAMES).tool_calls
    assert [c.name for c in parsed] == [c.name for c in CALLS]  # the rendering is the format's own
    # the base class's reading gives a turn's last call from the final event, not the stream
    expected = CALLS if type(fmt).partial_calls is not ToolCallFormat.partial_calls else CALLS[:-1]
    assert [(name, json.loads(args)) for _, name, args in calls.values()] == [(c.name, c.arguments) for c in expected]
    assert [cid for cid, _, _ in calls.values()] == [reader.call_id(i) for i in range(len(expected))]
    assert out.content == ""


@pytest.mark.parametrize(
    "fmt_name", [n for n in sorted(FORMATS) if FORMATS[n].trigger and not FORMATS[n].opens_at_start]
)
def test_answer_text_streams_until_the_trigger_then_the_call(fmt_name):
    """With a lazy grammar (auto), text that cannot open a call streams at once, ``<``, ``[`` and
    ``{`` included; from the trigger on, the call streams."""
    fmt = get_format(fmt_name)
    rendered = fmt.render_tool_calls(CALLS[:1])
    if not rendered.startswith(fmt.trigger or ""):
        pytest.skip(f"{fmt_name} writes its calls before its trigger")
    prose = "So a < b, x[0] and f(y) hold."
    reader = TurnReader(fmt, tool_names=NAMES, guarantee="trigger", trigger=fmt.trigger)
    first = reader.feed(prose)
    assert first.content == prose  # all of it, at once
    out = TurnDelta()
    for ch in rendered:
        out.add(reader.feed(ch))
    assert out.content == ""
    calls = assembled(out)
    expected = [] if type(fmt).partial_calls is ToolCallFormat.partial_calls else [CALLS[0]]  # see above
    assert [(name, json.loads(args)) for _, name, args in calls.values()] == [(c.name, c.arguments) for c in expected]


def test_hermes_name_comes_before_the_arguments_are_written():
    text = '<tool_call>\n{"name": "calculate_zorbix", "arguments": {"zorb": 1'
    _, out = read("hermes", text, "all")
    calls = assembled(out)
    assert calls[0][1:] == ["calculate_zorbix", '{"zorb": 1']  # the arguments as far as written


def test_with_one_tool_offered_the_call_is_announced_at_its_opening_tag():
    """The grammar writes only offered names: with one tool, the call's name is certain as soon as
    its opening tag is written, several decode steps before the name is."""
    reader = TurnReader(get_format("hermes"), tool_names={"calculate_zorbix"}, guarantee="all", trigger=None)
    assert reader.feed("<tool_call").calls == []
    first = reader.feed(">").calls
    assert [(d.index, d.id, d.name, d.arguments) for d in first] == [(0, reader.call_id(0), "calculate_zorbix", "")]
    out = TurnDelta()
    for ch in '\n{"name": "calculate_zorbix", "arguments": {"zorb": 15, "bix": 7}}\n</tool_call>':
        out.add(reader.feed(ch))
    assert all(d.id is None for d in out.calls)  # announced once
    assert json.loads("".join(d.arguments for d in out.calls)) == {"zorb": 15, "bix": 7}


def test_a_name_is_announced_once_only_one_offered_name_begins_with_what_is_written():
    reader = TurnReader(
        get_format("hermes"), tool_names={"get_weather", "get_time", "calculate_zorbix"}, guarantee="all", trigger=None
    )
    assert reader.feed('<tool_call>\n{"name": "get_').calls == []
    assert [d.name for d in reader.feed("w").calls] == ["get_weather"]
    assert reader.feed('eather", "arguments": ').calls == []


def test_a_name_that_begins_another_waits_for_its_closing_quote():
    reader = TurnReader(get_format("hermes"), tool_names={"get", "get_weather"}, guarantee="all", trigger=None)
    assert reader.feed('<tool_call>\n{"name": "get').calls == []
    assert [d.name for d in reader.feed('"').calls] == ["get"]


def test_mixtral_name_escape_cut_in_half_waits_for_the_next_piece():
    reader = TurnReader(get_format("mixtral"), tool_names={"get_weather", "get_time"}, guarantee="all", trigger=None)
    assert reader.feed('<tool\\_call>\n{"name": "get\\').calls == []
    assert [d.name for d in reader.feed("_w").calls] == ["get_weather"]


def test_with_one_tool_a_later_call_waits_until_it_is_known_not_to_repeat():
    """The second call's name is certain at its opening, but it may repeat the first verbatim
    (the loop drops that): it is announced only once complete, and a verbatim repeat never."""
    fmt = get_format("hermes")
    again = ToolCall(function=FunctionCall(name="calculate_zorbix", arguments={"zorb": 1, "bix": 2}))
    text = fmt.render_tool_calls([CALLS[1], CALLS[1], again])
    reader = TurnReader(fmt, tool_names={"calculate_zorbix"}, guarantee="all", trigger=None)
    out = TurnDelta()
    for ch in text:
        out.add(reader.feed(ch))
    assert [(name, json.loads(args)) for _, name, args in assembled(out).values()] == [
        ("calculate_zorbix", {"zorb": 15, "bix": 7}),
        ("calculate_zorbix", {"zorb": 1, "bix": 2}),
    ]


def test_hermes_arguments_stream_in_the_pieces_written():
    fmt = get_format("hermes")
    reader = TurnReader(fmt, tool_names=NAMES, guarantee="all", trigger=None)
    pieces = [
        '<tool_call>\n{"name": "calculate_zorbix", "arguments": ',
        '{"zorb"',
        ": 15, ",
        '"bix": 7}}\n</tool_call>',
    ]
    deltas = [reader.feed(p).calls for p in pieces]
    assert [d.name for d in deltas[0]] == ["calculate_zorbix"]
    assert [d.arguments for d in deltas[1]] == ['{"zorb"']
    assert [d.arguments for d in deltas[2]] == [": 15,"]
    assert "".join(d.arguments for d in deltas[3]) == ' "bix": 7}'


@pytest.mark.parametrize("text", ["a < b is true", "x[0] is {1}", "use <b>bold</b> and [links]"])
def test_hermes_text_that_cannot_open_a_call_is_never_held(text):
    reader = TurnReader(get_format("hermes"), tool_names=NAMES, guarantee="trigger", trigger="<tool_call>")
    assert "".join(reader.feed(ch).content for ch in text) == text


def test_the_beginning_of_an_opening_tag_waits_for_the_next_piece():
    reader = TurnReader(get_format("hermes"), tool_names=NAMES, guarantee="trigger", trigger="<tool_call>")
    assert reader.feed("Here <tool").content == "Here "
    assert reader.feed("bar> is a tag").content == "<toolbar> is a tag"


def test_a_call_outside_the_grammar_holds_the_rest_and_is_not_streamed():
    """A lenient form is not what the lazy grammar writes: it may not parse, so it is left to the
    final event (checked), and no text of the turn after it is shown."""
    reader = TurnReader(get_format("hermes"), tool_names=NAMES, guarantee="trigger", trigger="<tool_call>")
    out = reader.feed('Sure. <function=get_weather>{"city": "Paris"}</function> then <tool_call>{"name": "get_weather"')
    assert out.content == "Sure. " and out.calls == []
    assert reader.feed(', "arguments": {}}</tool_call> more').calls == []


def test_without_a_grammar_no_call_streams():
    reader = TurnReader(get_format("hermes"), tool_names=NAMES, guarantee="none", trigger=None)
    out = reader.feed('Hi <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>')
    assert out.content == "Hi " and out.calls == []


def test_a_bare_call_object_on_its_own_line_is_held_for_hermes():
    reader = TurnReader(get_format("hermes"), tool_names=NAMES, guarantee="trigger", trigger="<tool_call>")
    assert reader.feed('Calling:\n{"name": "get_weather"').content == "Calling:\n"


def test_a_repeated_call_is_not_streamed_twice():
    """The loop drops a verbatim repeat; the stream never announces it."""
    fmt = get_format("hermes")
    text = fmt.render_tool_calls([CALLS[0], CALLS[0], CALLS[1]])
    _, out = read("hermes", text, "all")
    calls = assembled(out)
    assert [(name, json.loads(args)) for _, name, args in calls.values()] == [
        (CALLS[0].name, CALLS[0].arguments),
        (CALLS[1].name, CALLS[1].arguments),
    ]


def test_a_format_with_no_opening_mark_shows_nothing_until_the_end():
    reader = TurnReader(get_format("thoughtful_steps"), tool_names=NAMES, guarantee="none", trigger=None)
    assert reader.feed('{"thought": "hm"').content == ""


def test_without_tools_all_text_but_call_markup_streams():
    reader = TurnReader(get_format("hermes"), tool_names=set(), guarantee="none", trigger=None)
    assert reader.feed("a < b\n{x}").content == "a < b\n{x}"


def test_mixtral_escaped_name_streams_unescaped():
    text = '<tool\\_call>\n{"name": "calculate\\_zorbix", "arguments": {"zorb": 15, "bix": 7}}\n</tool\\_call>'
    _, out = read("mixtral", text, "all")
    assert [(name, json.loads(args)) for _, name, args in assembled(out).values()] == [
        ("calculate_zorbix", {"zorb": 15, "bix": 7})
    ]


def test_a_reader_that_fails_holds_the_rest_of_the_turn_instead_of_failing_the_job():
    class Broken(type(get_format("hermes"))):  # type: ignore[misc]
        def partial_calls(self, text):
            raise RuntimeError("a bug")

    reader = TurnReader(Broken(), tool_names=NAMES, guarantee="trigger", trigger="<tool_call>")
    assert reader.feed("Hi ").content == "Hi "
    assert reader.feed('<tool_call>{"name": "get_weather"').calls == []
    assert reader.feed(", more text").content == ""
