"""GBNF: the schema builder, the validator that guards llama.cpp, and the test matcher."""

from __future__ import annotations

import pytest

from tests.support.gbnf_match import accepts
from worker.grammar import GrammarBuilder, GrammarError, check_grammar, literal, rule_name

# Reference grammars, verbatim (llama.cpp's own schema converter wrote them).
SEED_HERMES_LONG = r"""content ::= [^<] | "<" [^t<] | "<t" [^o<]
decimal-part ::= [0-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
integer ::= ("-"? integral-part) space
integral-part ::= [0-9] | [1-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
root ::= content* tool-call?
say-tool-call ::= "{" space say-tool-call-name-kv "," space say-tool-call-arguments-kv "}" space
say-tool-call-arguments ::= "{" space say-tool-call-arguments-text-kv "}" space
say-tool-call-arguments-kv ::= "\"arguments\"" space ":" space say-tool-call-arguments
say-tool-call-arguments-text-kv ::= "\"text\"" space ":" space string
say-tool-call-name ::= "\"say\""
say-tool-call-name-kv ::= "\"name\"" space ":" space say-tool-call-name
space ::= " "?
string ::=  "\"" (
        [^"\\] |
        "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
      )* "\"" space
superSecretTool-tool-call ::= "{" space superSecretTool-tool-call-name-kv "," space superSecretTool-tool-call-arguments-kv "}" space
superSecretTool-tool-call-arguments ::= "{" space superSecretTool-tool-call-arguments-a-kv "," space superSecretTool-tool-call-arguments-b-kv "}" space
superSecretTool-tool-call-arguments-a-kv ::= "\"a\"" space ":" space integer
superSecretTool-tool-call-arguments-b-kv ::= "\"b\"" space ":" space integer
superSecretTool-tool-call-arguments-kv ::= "\"arguments\"" space ":" space superSecretTool-tool-call-arguments
superSecretTool-tool-call-name ::= "\"superSecretTool\""
superSecretTool-tool-call-name-kv ::= "\"name\"" space ":" space superSecretTool-tool-call-name
tool-call ::= "<tool_call>" space (superSecretTool-tool-call | say-tool-call)  space "</tool_call>"
"""

SEED_MIXTRAL = r"""content ::= [^<] | "<" [^t<] | "<t" [^o<]
decimal-part ::= [0-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
integer ::= ("-"? integral-part) space
integral-part ::= [0-9] | [1-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
root ::= content* tool-call?
say-tool-call ::= "{" space say-tool-call-name-kv "," space say-tool-call-arguments-kv "}" space
say-tool-call-arguments ::= "{" space say-tool-call-arguments-text-kv "}" space
say-tool-call-arguments-kv ::= "\"arguments\"" space ":" space say-tool-call-arguments
say-tool-call-arguments-text-kv ::= "\"text\"" space ":" space string
say-tool-call-name ::= "\"" "say" "\"" space
say-tool-call-name-kv ::= "\"name\"" space ":" space say-tool-call-name
space ::= " "?
string ::=  "\"" (
        [^"\\] |
        "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
      )* "\"" space
superSecretTool-tool-call ::= "{" space superSecretTool-tool-call-name-kv "," space superSecretTool-tool-call-arguments-kv "}" space
superSecretTool-tool-call-arguments ::= "{" space superSecretTool-tool-call-arguments-a-kv "," space superSecretTool-tool-call-arguments-b-kv "}" space
superSecretTool-tool-call-arguments-a-kv ::= "\"a\"" space ":" space integer
superSecretTool-tool-call-arguments-b-kv ::= "\"b\"" space ":" space integer
superSecretTool-tool-call-arguments-kv ::= "\"arguments\"" space ":" space superSecretTool-tool-call-arguments
superSecretTool-tool-call-name ::= "\"" "superSecretTool" "\"" space
superSecretTool-tool-call-name-kv ::= "\"name\"" space ":" space superSecretTool-tool-call-name
tool-call ::= "<tool" "\\"? "_" "call>" space (superSecretTool-tool-call | say-tool-call)  space "</tool" "\\"? "_" "call>"
"""

SEED_FUNCTIONARY = r"""content ::= start content-without-start
content-without-start ::= "all\n<|content|>" not-from*
decimal-part ::= [0-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
integer ::= ("-"? integral-part) space
integral-part ::= [0-9] | [1-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
not-from ::= ([^<] | "<" ([^|] | "|" ([^f] | "f" ([^r] | "r" ([^o] | "o" ([^m] | "m" ([^|] | "|" ([^>])?)?)?)?)?)?)?)
root ::= content-without-start   content*   (tool-call+ content*)? | tool-call-without-start tool-call* content*
say-args ::= "{" space say-args-text-kv "}" space
say-args-text-kv ::= "\"text\"" space ":" space string
say-call ::= "say" "\n<|content|>\n" say-args "\n"
space ::= " "?
start ::= "<|from|>assistant\n<|recipient|>"
string ::=  "\"" (
        [^"\\] |
        "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
      )* "\"" space
superSecretTool-args ::= "{" space superSecretTool-args-a-kv "," space superSecretTool-args-b-kv "}" space
superSecretTool-args-a-kv ::= "\"a\"" space ":" space integer
superSecretTool-args-b-kv ::= "\"b\"" space ":" space integer
superSecretTool-call ::= "superSecretTool" "\n<|content|>\n" superSecretTool-args "\n"
tool-call ::= start tool-call-without-start
tool-call-without-start ::= superSecretTool-call | say-call
"""

SEED_THOUGHTFUL = r"""decimal-part ::= [0-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
integer ::= ("-"? integral-part) space
integral-part ::= [0-9] | [1-9] [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]? [0-9]?
next-step ::= next-step-0 | next-step-1
next-step-0 ::= "{" space next-step-0-tool-calls-kv "}" space
next-step-0-tool-calls ::= "[" space next-step-0-tool-calls-tuple-0 "]" space
next-step-0-tool-calls-kv ::= "\"tool_calls\"" space ":" space next-step-0-tool-calls
next-step-0-tool-calls-tuple-0 ::= next-step-0-tool-calls-tuple-0-0 | next-step-0-tool-calls-tuple-0-1
next-step-0-tool-calls-tuple-0-0 ::= "{" space next-step-0-tool-calls-tuple-0-0-name-kv "," space next-step-0-tool-calls-tuple-0-0-arguments-kv "}" space
next-step-0-tool-calls-tuple-0-0-arguments ::= "{" space next-step-0-tool-calls-tuple-0-0-arguments-a-kv "," space next-step-0-tool-calls-tuple-0-0-arguments-b-kv "}" space
next-step-0-tool-calls-tuple-0-0-arguments-a-kv ::= "\"a\"" space ":" space integer
next-step-0-tool-calls-tuple-0-0-arguments-b-kv ::= "\"b\"" space ":" space integer
next-step-0-tool-calls-tuple-0-0-arguments-kv ::= "\"arguments\"" space ":" space next-step-0-tool-calls-tuple-0-0-arguments
next-step-0-tool-calls-tuple-0-0-name ::= "\"superSecretTool\""
next-step-0-tool-calls-tuple-0-0-name-kv ::= "\"name\"" space ":" space next-step-0-tool-calls-tuple-0-0-name
next-step-0-tool-calls-tuple-0-1 ::= "{" space next-step-0-tool-calls-tuple-0-1-name-kv "," space next-step-0-tool-calls-tuple-0-1-arguments-kv "}" space
next-step-0-tool-calls-tuple-0-1-arguments ::= "{" space next-step-0-tool-calls-tuple-0-1-arguments-text-kv "}" space
next-step-0-tool-calls-tuple-0-1-arguments-kv ::= "\"arguments\"" space ":" space next-step-0-tool-calls-tuple-0-1-arguments
next-step-0-tool-calls-tuple-0-1-arguments-text-kv ::= "\"text\"" space ":" space string
next-step-0-tool-calls-tuple-0-1-name ::= "\"say\""
next-step-0-tool-calls-tuple-0-1-name-kv ::= "\"name\"" space ":" space next-step-0-tool-calls-tuple-0-1-name
next-step-1 ::= "{" space next-step-1-result-kv "}" space
next-step-1-result-kv ::= "\"result\"" space ":" space integer
next-step-kv ::= "\"next_step\"" space ":" space next-step
root ::= "{" space thought-about-next-step-only-kv "," space next-step-kv "}" space
space ::= " "?
string ::=  "\"" (
        [^"\\] |
        "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
      )* "\"" space
thought-about-next-step-only-kv ::= "\"thought_about_next_step_only\"" space ":" space string
"""

SEED_CALL = '<tool_call>{"name": "superSecretTool", "arguments": {"a": 2535, "b": 32222000403}}</tool_call>'


# ---------------------------------------------------------------- the reference grammars


@pytest.mark.parametrize("grammar", [SEED_HERMES_LONG, SEED_MIXTRAL, SEED_FUNCTIONARY, SEED_THOUGHTFUL])
def test_seed_grammars_pass_the_check(grammar):
    check_grammar(grammar)


def test_seed_hermes_grammar_matches_the_seed_call():
    assert accepts(SEED_HERMES_LONG, "Sure. " + SEED_CALL)
    assert not accepts(SEED_HERMES_LONG, SEED_CALL.replace("superSecretTool", "other"))


def test_seed_mixtral_grammar_allows_escaped_underscores():
    assert accepts(
        SEED_MIXTRAL, SEED_CALL.replace("tool_call", "tool\\_call").replace('"superSecretTool"', '"superSecretTool" ')
    )


def test_seed_functionary_grammar():
    assert accepts(SEED_FUNCTIONARY, 'superSecretTool\n<|content|>\n{"a": 1, "b": 2}\n')
    assert accepts(SEED_FUNCTIONARY, "all\n<|content|>just talking")


# ---------------------------------------------------------------- the validator rejects


@pytest.mark.parametrize(
    "grammar, message",
    [
        ("", "empty"),
        ('a ::= "x"\n', "no 'root' rule"),
        ("root ::= a\n", "undefined rule 'a'"),
        ('root ::= "a" | b\nb ::= c\n', "undefined rule 'c'"),
        ('root ::= ("a" | "b"\n', "unbalanced parentheses"),
        ('root ::= "a")\n', "unbalanced parentheses"),
        ("root ::= [a-\n", "bad character class"),
        ("root ::= [abc", "bad character class"),
        ("root ::= [z-a]\n", "bad character class: range"),
        ("root ::= []\n", "bad character class: it is empty"),
        ('root ::= "a"\nroot ::= "b"\n', "defined twice"),
        ('root ::= root "a" | "b"\n', "left recursion"),
        ('root ::= a\na ::= b? root "x"\nb ::= "y"\n', "left recursion"),
        ('root ::= "\\q"\n', "unknown escape"),
        ('root ::= "\\x4"\n', "hex digits"),
        ('root ::= "abc\n', "unterminated string literal"),
        ('my_rule ::= "a"\nroot ::= my_rule\n', "expected '::='"),
        ('root ::= * "a"\n', "nothing before it to repeat"),
        ('root ::= "a"{3,1}\n', "maximum is below the minimum"),
        ('root ::= "a"{0,5000}\n', "repetition count above"),
        ('root ::= "a"{x}\n', "bad repetition"),
        ('root ::= ("a"?)*\n', "match the empty string"),
        ('root ::= "a" b ::= "c"\n', "missing newline"),
        ('root ::= "a" @\n', "unexpected '@'"),
        ("root ::= <tok>\n", "unexpected '<'"),
    ],
)
def test_check_grammar_rejects(grammar, message):
    with pytest.raises(GrammarError, match=message.replace("(", r"\(").replace("[", r"\[").replace("*", r"\*")):
        check_grammar(grammar)


def test_hidden_left_recursion_through_a_nullable_rule():
    # llama.cpp's own check only sees directly empty rules: this one hangs it. We catch it.
    with pytest.raises(GrammarError, match="left recursion: root -> root"):
        check_grammar('root ::= x root "c" | "b"\nx ::= "a"?\n')


def test_error_names_the_line_and_rule():
    with pytest.raises(GrammarError) as e:
        check_grammar('root ::= a\na ::= "x"\nb ::= [z-a]\n')
    assert str(e.value).startswith("line 3 in rule 'b':")


# ---------------------------------------------------------------- the validator accepts


@pytest.mark.parametrize(
    "grammar",
    [
        '# comment\nroot ::= "a" # trailing\n',
        'root ::= (\n  "a" |\n  "b"\n)*\n',
        'root ::= | "a"\n',
        'root ::= . "x"{2} [^\\]\\-] [\\x41-\\u005A]\n',
        'root ::= [\\[\\]] "\\U0001F600"\n',
        'root ::= "a"{ 1 , 2 } "b"{2,}\n',
        'root ::= "a"\r\nb ::= "c"\r\n',
        'root ::= x "y" root | "z"\nx ::= "a"\n',  # right recursion is fine
        'root ::= "é" [à-ü]\n',
    ],
)
def test_check_grammar_accepts(grammar):
    check_grammar(grammar)


# ---------------------------------------------------------------- the builder


def test_rule_names_are_sanitized():
    assert rule_name("get_weather.v2") == "get-weather-v2"
    assert rule_name("__x__") == "x"
    assert rule_name("名前") == "x"


def test_literal_escapes():
    assert literal('a"b\\c\nd\x01') == '"a\\"b\\\\c\\nd\\x01"'
    check_grammar(f"root ::= {literal(chr(0) + 'é' + chr(127))}\n")


def test_colliding_rule_names_stay_distinct():
    b = GrammarBuilder()
    first = b.add("a_b", '"1"')
    second = b.add("a-b", '"2"')
    same = b.add("a_b", '"1"')
    assert first == same == "a-b" and second == "a-b-2"


def build(schema):
    b = GrammarBuilder()
    b.add("root", b.schema(schema, "value-of"))
    return b.render()


def test_object_required_and_optional_keys():
    g = build(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
            "required": ["a"],
        }
    )
    assert accepts(g, '{"a": 1}')
    assert accepts(g, '{"a": 1, "b": "x", "c": true}')
    assert accepts(g, '{"a": 1, "c": false}')
    assert not accepts(g, '{"b": "x"}')  # a is required
    assert not accepts(g, '{"a": 1, "d": 2}')  # no extra keys
    assert not accepts(g, '{"a": "1"}')


def test_object_without_required_keys():
    g = build({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    for text in ("{}", '{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'):
        assert accepts(g, text), text
    assert not accepts(g, '{, "b": 2}')


def test_integer_digits_are_bounded():
    g = build({"type": "integer"})
    assert accepts(g, "32222000403") and accepts(g, "-7") and accepts(g, "0")
    assert accepts(g, "9" * 16)
    assert not accepts(g, "9" * 17)
    assert not accepts(g, "01") and not accepts(g, "1.5")


def test_number_boolean_null():
    assert accepts(build({"type": "number"}), "-1.25e10")
    assert accepts(build({"type": "boolean"}), "false")
    assert accepts(build({"type": "null"}), "null")


def test_string_escapes():
    g = build({"type": "string"})
    assert accepts(g, r'"a \"quoted\" \\ \u00e9 word"')
    assert not accepts(g, '"raw\nnewline"')
    assert not accepts(g, '"unterminated')


def test_enum_and_const():
    g = build({"enum": ["c", "f", 1, None]})
    assert accepts(g, '"c"') and accepts(g, "1") and accepts(g, "null")
    assert not accepts(g, '"k"')
    assert accepts(build({"const": "x"}), '"x"')


def test_array_of_items():
    g = build({"type": "array", "items": {"type": "integer"}})
    assert accepts(g, "[]") and accepts(g, "[1, 2,3]")
    assert not accepts(g, '["a"]')


def test_nested_object_and_any_of_and_type_list():
    g = build(
        {
            "type": "object",
            "properties": {
                "inner": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "maybe": {"type": ["number", "null"]},
            },
            "required": ["inner", "either", "maybe"],
        }
    )
    assert accepts(g, '{"inner": {"x": "y"}, "either": 3, "maybe": null}')
    assert accepts(g, '{"inner": {"x": "y"}, "either": "s", "maybe": 1.5}')
    assert not accepts(g, '{"inner": {}, "either": 3, "maybe": null}')


def test_untyped_schema_is_any_json_value():
    g = build({})
    for text in ('{"k": [1, {"z": null}]}', '"s"', "3", "true", "[]"):
        assert accepts(g, text), text


def test_odd_property_names():
    g = build({"type": "object", "properties": {'we"ird key_ü': {"type": "string"}}, "required": ['we"ird key_ü']})
    assert accepts(g, '{"we\\"ird key_ü": "v"}')


def test_render_refuses_an_invalid_grammar():
    b = GrammarBuilder()
    b.add("root", "missing-rule")
    with pytest.raises(GrammarError, match="undefined rule 'missing-rule'"):
        b.render()


def test_deep_schema_falls_back_to_any_value():
    schema = {"type": "string"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"n": schema}, "required": ["n"]}
    check_grammar(build(schema))
