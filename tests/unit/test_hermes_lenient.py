"""The other ways Hermes-style models write calls (worker/formats/lenient.py), read only when they
name an offered tool; everything else stays content, whole."""

from __future__ import annotations

import json

import pytest

from worker.formats.hermes import FORMAT

NAMES = {"get_weather", "search"}
ARGS = {"location": 'Paris, "the" </function> city', "days": 2}
CALL = json.dumps({"name": "get_weather", "arguments": ARGS})
ARGS_JSON = json.dumps(ARGS)


def parse(text, tool_names=NAMES):
    return FORMAT.parse(text, tool_names)


def calls(out):
    return [(c.name, c.arguments) for c in out.tool_calls]


@pytest.mark.parametrize(
    "text",
    [
        f"<function=get_weather>{ARGS_JSON}</function>",
        f'<function name="get_weather">{ARGS_JSON}</function>',
        f"<tool_call>\n<function=get_weather>{ARGS_JSON}</function>\n</tool_call>",
        f"<tool>{CALL}</tool>",
        f"<tools>\n{CALL}\n</tools>",
        f"<response>{CALL}</response>",
        f"<json>{CALL}</json>",
        f"<xml>{CALL}</xml>",
        f"<function_call>{CALL}</function_call>",
        f"<function_call>\n```json\n{CALL}\n```\n</function_call>",
        f"```json\n{CALL}\n```",
        f"```xml\n<tool_call>\n{CALL}\n</tool_call>\n```",
        f"```xml\n<function=get_weather>{ARGS_JSON}</function>\n```",
        f"<tool_call>[{CALL}]</tool_call>",
    ],
)
def test_alternate_forms_are_calls(text):
    out = parse("Let me look.\n" + text + "\nDone.")
    assert calls(out) == [("get_weather", ARGS)], out
    assert out.content == "Let me look.\nDone." and out.errors == []


def test_a_json_array_of_calls_in_one_tag():
    two = json.dumps([{"name": "get_weather", "arguments": ARGS}, {"name": "search", "arguments": {"q": "x"}}])
    assert calls(parse(f"<tool_call>{two}</tool_call>")) == [("get_weather", ARGS), ("search", {"q": "x"})]


def test_function_tag_without_arguments():
    assert calls(parse("<function=search></function>")) == [("search", {})]


def test_an_unclosed_final_alternate_form_is_a_call():
    assert calls(parse(f"<function=get_weather>{ARGS_JSON}")) == [("get_weather", ARGS)]
    assert calls(parse(f"<tools>{CALL}")) == [("get_weather", ARGS)]


@pytest.mark.parametrize(
    "text",
    [
        f"<function=launch>{ARGS_JSON}</function>",  # not an offered tool
        '<function name="launch">{}</function>',
        '<tools>{"name": "launch", "arguments": {}}</tools>',
        '```json\n{"name": "Alice", "age": 3}\n```',  # JSON that is no call
        "<response>The weather is fine.</response>",  # a wrapper around prose
        "<json>[1, 2, 3]</json>",
        # a tool definition echoed back is not a call, though it names an offered tool
        '<tools>{"type": "function", "function": {"name": "search", "description": "Searches", '
        '"parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}</tools>',
        '<tools>{"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}</tools>',
        "Use <function=get_weather> to ask for the weather.",
        "```python\nprint({'name': 'search'})\n```",
    ],
)
def test_what_is_not_a_call_of_an_offered_tool_stays_content_whole(text):
    whole = f"Before. {text} After."
    out = parse(whole)
    assert out.tool_calls == [] and out.errors == [] and out.content == whole


def test_alternate_forms_need_the_offered_tools():
    text = f"<function=get_weather>{ARGS_JSON}</function>"
    out = parse(text, None)
    assert out.tool_calls == [] and out.content == text


@pytest.mark.parametrize(
    "text",
    [
        "I will use the <tool_call> tag when I need a tool. The answer is 4.",
        "Write <tool_call> and then a JSON object; the weather in Paris is sunny.",
        "Write <tool_call> like this:\nfoo <tool_call>",  # mentioned twice, the last one at the end
    ],
)
def test_an_opening_tag_named_in_prose_stays_content_whole(text):
    out = parse(text)
    if text.endswith("<tool_call>"):  # an opening tag at the very end is a call cut short
        assert out.truncated_call and out.content == text.removesuffix("<tool_call>").strip()
    else:
        assert out.tool_calls == [] and out.errors == [] and out.content == text


def test_a_tag_named_in_prose_then_a_real_call():
    out = parse(f"Calls go in <tool_call> tags. <tool_call>{CALL}</tool_call>")
    assert calls(out) == [("get_weather", ARGS)] and out.content == "Calls go in <tool_call> tags."


def test_a_broken_body_closed_by_its_tag_is_still_an_error():
    out = parse("<tool_call>get_weather(location='Paris')</tool_call> after")
    assert out.tool_calls == [] and out.errors and out.content == "after"


def test_call_json_on_its_own_line_at_the_end_is_a_call():
    out = parse(f"Let me check the weather.\n{CALL}")
    assert calls(out) == [("get_weather", ARGS)] and out.content == "Let me check the weather."


def test_call_json_inside_a_sentence_or_followed_by_prose_is_not_a_call():
    for text in (f"Calling: {CALL}", f"Like this:\n{CALL}\nThat is how you call it."):
        out = parse(text)
        assert out.tool_calls == [] and out.content == text


def test_think_drafts_in_alternate_forms_are_ignored():
    out = parse("<think><function=search>{}</function></think>Answer.")
    assert out.tool_calls == [] and out.content == "Answer."


def test_strings_come_through_byte_for_byte():
    args = {"q": "a, }b \\u00e9 'x' True </tools> ```"}
    out = parse(f"<tools>{json.dumps({'name': 'search', 'arguments': args})}</tools>")
    assert calls(out) == [("search", args)]
