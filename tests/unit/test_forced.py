"""The text a grammar forces next (worker/grammar/forced.py), on the formats' real grammars."""

from __future__ import annotations

from tests.support.zorbix import ZORBIX
from worker.formats import get_format
from worker.grammar.forced import Forced

CALL = '<tool_call>\n\n{ "name": "calculate_zorbix", "arguments": { "zorb": 15, "bix": 7 } }\n\n</tool_call>'


def _walk(grammar: str, text: str) -> list[str]:
    """Write ``text`` as a model would, taking each forced piece whenever there is one."""
    f = Forced(grammar)
    pieces, at = [], 0
    while at < len(text):
        forced = f.next_text()
        if forced:
            assert text.startswith(forced, at), (forced, text[at:])
            pieces.append(forced)
            f.feed(forced)
            at += len(forced)
        else:
            f.feed(text[at])
            at += 1
    return pieces


def test_a_required_hermes_call_forces_its_markup_name_and_keys():
    pieces = _walk(get_format("hermes").call_grammar([ZORBIX]), CALL)
    assert pieces == [
        "<tool_call>",
        "{",
        '"name"',
        '"calculate_zorbix"',
        '"arguments"',
        "{",
        '"zorb"',
        '"bix"',
        "}",
        "}",
        "</tool_call>",
    ]


def test_nothing_is_forced_where_the_grammar_branches():
    two = {**ZORBIX, "function": {**ZORBIX["function"], "name": "calculate_zorbax"}}
    f = Forced(get_format("hermes").call_grammar([ZORBIX, two]))
    f.feed('<tool_call>\n{"name": ')
    assert f.next_text() == '"calculate_zorb'  # the names agree this far, then branch


def test_repetitions_and_optional_parts():
    f = Forced('root ::= "a"{2,3} "b"? "cd" [x]+ "!"')
    assert f.next_text() == "aa"  # the third a is optional
    f.feed("aa")
    assert f.next_text() == ""  # a, b or c
    f.feed("acdxx")
    assert f.next_text() == ""  # another x, or !
    f.feed("!")
    assert f.stacks is not None and f.next_text() == ""  # the end


def test_text_the_grammar_does_not_take_ends_the_forcing():
    f = Forced('root ::= "abc" "def"')
    f.feed("abX")
    assert f.stacks is None and f.next_text() == ""


def test_next_text_does_not_move_the_state():
    f = Forced('root ::= "abc" [0-9] "def"')
    assert f.next_text() == "abc" and f.next_text() == "abc"


def test_every_formats_required_grammar_can_be_followed():
    # A format's grammar that cannot be followed only means nothing is forced for it; here each one is read.
    from worker.formats import available_formats

    for name in available_formats():
        fmt = get_format(name)
        grammar = fmt.grammar([ZORBIX], required=True)
        assert Forced(grammar).stacks is not None, name
