"""The Hermes parser, row by row of the parser table in the issue."""

from __future__ import annotations

import json

import pytest

from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats.hermes import FORMAT
from worker.formats.tagged import parse_tagged

NAMES = {"get_weather", "search", "superSecretTool"}


def parse(text, tool_names=NAMES):
    return FORMAT.parse(text, tool_names)


def call(name="get_weather", args=None):
    return json.dumps({"name": name, "arguments": {"location": "Paris"} if args is None else args})


# ---------------------------------------------------------------- finding calls and content


def test_single_call():
    out = parse(f"<tool_call>\n{call()}\n</tool_call>")
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("get_weather", {"location": "Paris"})]
    assert out.content == "" and out.errors == [] and not out.truncated_call


def test_content_before_between_and_after_calls():
    text = (
        "Let me check.\n"
        f"<tool_call>\n{call()}\n</tool_call>\n"
        "and also\n"
        f"<tool_call>{call('search', {'q': 'x'})}</tool_call>\n"
        "  Done.  "
    )
    out = parse(text)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search"]
    assert out.content == "Let me check.\nand also\nDone."


def test_every_call_gets_a_fresh_id():
    out = parse(f"<tool_call>{call()}</tool_call><tool_call>{call()}</tool_call>")
    ids = [c.id for c in out.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


def test_model_written_id_is_not_trusted():
    text = '<tool_call>{"id": "call_531873", "type": "function", "function": {"name": "search", "arguments": {}}}</tool_call>'
    (c,) = parse(text).tool_calls
    assert c.id != "call_531873" and c.id.startswith("call_")


def test_no_calls_is_plain_content():
    out = parse("  The weather is fine.  ")
    assert out.content == "The weather is fine." and out.tool_calls == [] and out.errors == []


# ---------------------------------------------------------------- the JSON-aware scanner


def test_closing_tag_inside_a_string_does_not_end_the_call():
    text = '<tool_call>{"name": "search", "arguments": {"q": "what is </tool_call> for?"}}</tool_call>after'
    out = parse(text)
    assert out.tool_calls[0].arguments == {"q": "what is </tool_call> for?"}
    assert out.content == "after"


def test_brace_inside_a_string_does_not_end_the_call():
    text = '<tool_call>{"name": "search", "arguments": {"q": "a } b { c"}}</tool_call>'
    assert parse(text).tool_calls[0].arguments == {"q": "a } b { c"}


def test_escaped_quote_inside_a_string():
    text = r'<tool_call>{"name": "search", "arguments": {"q": "say \"}\" </tool_call>"}}</tool_call>'
    assert parse(text).tool_calls[0].arguments == {"q": 'say "}" </tool_call>'}


def test_opening_tag_inside_a_string_is_not_a_second_call():
    text = '<tool_call>{"name": "search", "arguments": {"q": "<tool_call>{}"}}</tool_call>'
    out = parse(text)
    assert len(out.tool_calls) == 1 and out.errors == []


# ---------------------------------------------------------------- unclosed and truncated


def test_unclosed_final_call_with_complete_json_is_a_call():
    out = parse(f"Sure.\n<tool_call>\n{call()}")
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.content == "Sure." and out.errors == [] and not out.truncated_call


def test_unclosed_final_call_with_incomplete_json_is_truncated():
    out = parse('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Par')
    assert out.tool_calls == []
    assert out.truncated_call
    assert len(out.errors) == 1 and "incomplete" in out.errors[0]
    assert out.content == "Sure."  # the half call is not content


def test_output_cut_right_after_the_opening_tag_is_truncated():
    out = parse("Sure.\n<tool_call>\n")
    assert out.truncated_call and out.tool_calls == [] and out.content == "Sure."


def test_output_cut_inside_the_opening_tag_is_truncated():
    out = parse("Sure.\n<tool_ca")
    assert out.truncated_call and out.content == "Sure." and "incomplete" in out.errors[0]


def test_words_between_json_and_a_late_closing_tag_are_content():
    out = parse(f"<tool_call>{call()}\nI will now wait for the result.\n</tool_call>")
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.content == "I will now wait for the result."


def test_stray_text_between_json_and_closing_tag_is_dropped():
    out = parse(f"<tool_call>{call()}}}\n</tool_call>after")
    assert [c.name for c in out.tool_calls] == ["get_weather"] and out.errors == []
    assert out.content == "after"


def test_complete_call_then_truncated_call():
    out = parse(f'<tool_call>{call()}</tool_call>\n<tool_call>{{"name": "search", "argu')
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.truncated_call and "tool call 2" in out.errors[0]


def test_missing_closing_tag_between_two_calls():
    out = parse(f"<tool_call>{call()}\n<tool_call>{call('search', {})}</tool_call>")
    assert [c.name for c in out.tool_calls] == ["get_weather", "search"]


def test_broken_json_before_closing_tag_is_an_error_and_parsing_goes_on():
    text = '<tool_call>{"name": "search", "arguments": {"q": 1}</tool_call> then <tool_call>' + call() + "</tool_call>"
    out = parse(text)
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert len(out.errors) == 1 and out.errors[0].startswith("tool call 1 is not valid JSON: ")
    assert not out.truncated_call
    assert out.content == "then"


# ---------------------------------------------------------------- lenient JSON


@pytest.mark.parametrize(
    "args_text, expected",
    [
        ('{"q": "True story"}', {"q": "True story"}),
        ('{"q": "a, }b"}', {"q": "a, }b"}),
        ('{"url": "http://x.y/a?b=1,c:2"}', {"url": "http://x.y/a?b=1,c:2"}),
        ("{'q': \"what's up\"}", {"q": "what's up"}),
        ('{"q": "AT&amp;T"}', {"q": "AT&amp;T"}),
    ],
)
def test_argument_strings_come_through_byte_for_byte(args_text, expected):
    out = parse(f'<tool_call>{{"name": "search", "arguments": {args_text}}}</tool_call>')
    assert out.tool_calls[0].arguments == expected


def test_html_entities_in_content_are_not_unescaped():
    assert parse("AT&amp;T &lt;b&gt;").content == "AT&amp;T &lt;b&gt;"


def test_single_quoted_python_call():
    out = parse(
        "<tool_call>\n{'name': 'get_weather', 'arguments': {'location': 'Paris', 'metric': True}}\n</tool_call>"
    )
    assert out.tool_calls[0].arguments == {"location": "Paris", "metric": True}


def test_trailing_comma_repaired():
    out = parse('<tool_call>{"name": "search", "arguments": {"q": "x",},}</tool_call>')
    assert out.tool_calls[0].arguments == {"q": "x"}


# ---------------------------------------------------------------- argument shapes


def test_arguments_as_a_json_string():
    text = '<tool_call>{"name": "search", "arguments": "{\\"q\\": \\"x\\"}"}</tool_call>'
    assert parse(text).tool_calls[0].arguments == {"q": "x"}


@pytest.mark.parametrize(
    "body", ['{"name": "search", "arguments": null}', '{"name": "search"}', '{"name": "search", "arguments": ""}']
)
def test_null_missing_or_empty_arguments_are_empty(body):
    out = parse(f"<tool_call>{body}</tool_call>")
    assert out.tool_calls[0].arguments == {} and out.errors == []


def test_parameters_key_for_arguments():
    out = parse('<tool_call>{"name": "search", "parameters": {"q": "x"}}</tool_call>')
    assert out.tool_calls[0].arguments == {"q": "x"}


def test_openai_nested_shape():
    text = '<tool_call>{"type": "function", "function": {"name": "search", "arguments": "{\\"q\\": 1}"}}</tool_call>'
    assert parse(text).tool_calls[0].arguments == {"q": 1}


def test_seed_003_inline_call():
    text = (
        '<tool_call>{"id": "call_531873", "type": "function", "function": {"name": "superSecretTool", '
        '"arguments": {"a": 2535, "b": 32222000403}}}</tool_call>'
    )
    (c,) = parse(text).tool_calls
    assert c.name == "superSecretTool" and c.arguments == {"a": 2535, "b": 32222000403}


def test_list_of_calls_in_one_block():
    out = parse(f"<tool_call>[{call()}, {call('search', {'q': 'x'})}]</tool_call>")
    assert [c.name for c in out.tool_calls] == ["get_weather", "search"]


def test_json_fence_inside_the_tags():
    out = parse(f"<tool_call>\n```json\n{call()}\n```\n</tool_call>")
    assert [c.name for c in out.tool_calls] == ["get_weather"] and out.errors == []


# ---------------------------------------------------------------- <think>


def test_call_drafted_inside_think_is_not_a_call():
    text = (
        f"<think>maybe <tool_call>{call('search', {})}</tool_call>?</think>I'll check.<tool_call>{call()}</tool_call>"
    )
    out = parse(text)
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.content == "I'll check."


def test_unclosed_think_swallows_to_the_end():
    out = parse(f"Hi <think>plan: <tool_call>{call()}</tool_call>")
    assert out.tool_calls == [] and out.content == "Hi" and not out.truncated_call


def test_lone_closing_think_ends_a_prompt_opened_think():
    out = parse(f"reasoning <tool_call>{call('search', {})}</tool_call></think>Answer.")
    assert out.tool_calls == [] and out.content == "Answer."


def test_text_around_think_blocks_is_content():
    assert parse("a<think>x</think>b<think>y</think>c").content == "a\nb\nc"


def test_think_tags_inside_an_argument_are_just_text():
    text = '<tool_call>{"name": "search", "arguments": {"q": "what do <think> and </think> do?"}}</tool_call>'
    (c,) = parse(text).tool_calls
    assert c.arguments == {"q": "what do <think> and </think> do?"}


def test_lone_closing_think_after_a_call_is_not_a_prompt_think():
    text = '<tool_call>{"name": "search", "arguments": {"q": "</think>"}}</tool_call>'
    assert parse(text).tool_calls[0].arguments == {"q": "</think>"}


# ---------------------------------------------------------------- untagged JSON


def test_json_object_in_prose_is_not_a_call():
    text = 'Here is the record: {"name": "Alice", "age": 3}'
    out = parse(text)
    assert out.tool_calls == [] and out.content == text


def test_bare_json_naming_a_person_is_not_a_call_even_alone():
    out = parse('{"name": "Alice", "age": 3}')
    assert out.tool_calls == [] and out.content == '{"name": "Alice", "age": 3}'


def test_bare_json_call_that_is_the_whole_message():
    out = parse(call())
    assert [c.name for c in out.tool_calls] == ["get_weather"] and out.content == ""


def test_fenced_bare_json_call():
    out = parse(f"```json\n{call()}\n```")
    assert [c.name for c in out.tool_calls] == ["get_weather"]


def test_bare_json_call_with_prose_is_not_a_call():
    assert parse(f"Calling: {call()}").tool_calls == []


def test_bare_json_needs_tool_names():
    assert FORMAT.parse(call(), None).tool_calls == []


def test_bare_json_naming_an_unknown_tool_is_not_a_call():
    assert parse(call("launch_missiles", {})).tool_calls == []


# ---------------------------------------------------------------- errors


def test_unknown_tool_in_tags_is_still_a_call_without_error():
    out = parse(f"<tool_call>{call('launch_missiles', {})}</tool_call>")
    assert [c.name for c in out.tool_calls] == ["launch_missiles"] and out.errors == []


def test_invalid_json_error_is_readable():
    out = parse('<tool_call>{"name": "search" "arguments": {}}</tool_call>')
    assert out.tool_calls == []
    assert out.errors == ["tool call 1 is not valid JSON: Expecting ',' delimiter at line 1 column 19"]


def test_missing_name_error():
    out = parse('<tool_call>{"arguments": {"q": 1}}</tool_call>')
    assert out.tool_calls == [] and 'has no "name"' in out.errors[0]


def test_arguments_not_an_object_error():
    out = parse('<tool_call>{"name": "search", "arguments": [1, 2]}</tool_call>')
    assert out.tool_calls == [] and "arguments must be a JSON object" in out.errors[0]


def test_arguments_string_not_json_error():
    out = parse('<tool_call>{"name": "search", "arguments": "q=1"}</tool_call>')
    assert "arguments is a string that is not valid JSON" in out.errors[0]


def test_non_json_body_error():
    out = parse("<tool_call>get_weather(location='Paris')</tool_call>")
    assert out.tool_calls == [] and out.errors[0].startswith("tool call 1 is not valid JSON")


def test_overlong_name_is_an_error_not_an_exception():
    out = parse(f"<tool_call>{call('x' * 500, {})}</tool_call>")
    assert out.tool_calls == [] and out.errors and out.errors[0].startswith("tool call 1")


def test_good_and_bad_calls_are_numbered_in_order():
    text = f'<tool_call>{call()}</tool_call><tool_call>{{"arguments": {{}}}}</tool_call>'
    out = parse(text)
    assert len(out.tool_calls) == 1 and out.errors[0].startswith("tool call 2 ")


@pytest.mark.parametrize(
    "text", ["", "<tool_call>", "</tool_call>", "<tool_call></tool_call>", "<think>", "{", "}{", "\x00"]
)
def test_never_raises_on_odd_input(text):
    out = parse(text)
    assert isinstance(out.content, str)


# ---------------------------------------------------------------- rendering round trip


def test_render_then_parse_round_trip():
    calls = [
        ToolCall(function=FunctionCall(name="search", arguments={"q": "é </tool_call> }"})),
        ToolCall(function=FunctionCall(name="get_weather", arguments={})),
    ]
    text = FORMAT.render_tool_calls(calls)
    assert text.startswith("<tool_call>\n{") and text.endswith("}\n</tool_call>")
    out = parse(text)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [(c.name, c.arguments) for c in calls]


def test_render_tool_result():
    assert FORMAT.render_tool_result("x", "call_1", "42") == "<tool_response>\n42\n</tool_response>"


def test_parse_tagged_with_other_tags():
    out = parse_tagged('<fn>{"name": "a"}</fn> ok', None, "<fn>", "</fn>")
    assert [c.name for c in out.tool_calls] == ["a"] and out.content == "ok"
