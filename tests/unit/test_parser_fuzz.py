# ruff: noqa: RUF001 - DeepSeek's markers are spelled with fullwidth bars (U+FF5C).
"""Parsers never raise: random text, and valid outputs mutated the way generation breaks them."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats import FORMATS as FORMAT_TABLE
from worker.formats.base import ParsedOutput
from worker.formats.gemma4 import Gemma4Format
from worker.formats.lfm2 import Lfm2Format
from worker.formats.xmlcalls import XmlCallFormat

FORMATS = list(FORMAT_TABLE.values())  # every registered format, so a new one is fuzzed too
NAMES = {"superSecretTool", "say", "get_weather"}

# Pieces that matter to the parsers, so random text reaches the interesting branches.
FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<tool\\_call>",
    "</tool\\_call>",
    "<tool_",
    "<think>",
    "</think>",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    "\\",
    "\\_",
    ",",
    ":",
    "```json\n",
    "```",
    "\n",
    " ",
    '"name"',
    '"arguments"',
    '"parameters"',
    '"function"',
    '"say"',
    '"superSecretTool"',
    "null",
    "True",
    "None",
    "1e999",
    "NaN",
    "-",
    "0",
    "9" * 30,
    "é",
    "\x00",
    "<|from|>",
    "<|recipient|>",
    "<|content|>",
    "<|stop|>",
    "all",
    "assistant\n",
    '"next_step"',
    '"tool_calls"',
    '"result"',
    '"thought_about_next_step_only"',
    # the other forms the Hermes parser reads (worker/formats/lenient.py)
    "<function=say>",
    '<function name="say">',
    "</function>",
    "<tools>",
    "</tools>",
    "<response>",
    "</response>",
    "<function_call>",
    "</function_call>",
    "```xml\n",
    # the template families' markup (worker/formats/detect.py)
    "<function=",
    "<parameter=text>",
    "</parameter>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    '<invoke name="say">',
    "</invoke>",
    "<minimax:tool_call>",
    "<seed:tool_call>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    '{"name": "say", "parameters": ',
    ">>>",
    ">>>say\n",
    "all\n",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    '<｜DSML｜invoke name="say">',
    '<｜DSML｜parameter name="text" string="false">',
    "<|tool_call_begin|>functions.say:0<|tool_call_argument_begin|>",
    "<|channel|>commentary to=functions.say <|constrain|>json<|message|>",
    "<|channel|>analysis<|message|>",
    "<|call|>",
    "<|end|>",
    "<|tool_call|>",
    "Action: ```json\n",
    "<|START_ACTION|>",
    "<|START_THINKING|>",
    '"tool_name"',
    "<TOOLCALL>",
    "<tool_calls>",
    "<|tools_prefix|>",
    " functools",
    "<|tool_call:begin|>",
    "<![CDATA[",
    "<|tool_call_start|>[",
    "say(text=",
    ")]<|tool_call_end|>",
    "<|tool_call>call:say{",
    "text:",
    '<|"|>',
    "}<tool_call|>",
    "<|open|>tools<|sep|>",
    '<|open|>call tool="say" index="1"<|sep|>',
    '<|open|>argument key="text" type="string"<|sep|>',
    "<|close|>argument<|sep|>",
    "<|close|>think<|sep|>",
    "function call<|role_sep|>",
    "]]>",
]

random_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=40).map("".join)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
calls = st.lists(
    st.builds(
        lambda name, args: ToolCall(function=FunctionCall(name=name, arguments=args)),
        st.sampled_from(sorted(NAMES)),
        st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    ),
    min_size=1,
    max_size=3,
)


# The XML-like formats write a string argument as raw text, so one that reads as JSON, holds the
# closing tag or starts with a newline cannot come back the same (the tool's schema, which
# parsers are not given, would tell), and LFM2 and Gemma 4 write argument names bare: their
# exact round trip uses plain names and strings.
plain_text = st.text(alphabet=st.characters(blacklist_characters="<\n\r", blacklist_categories=("Cs",)), max_size=10)
plain_strings = plain_text.map(lambda t: "s" + t)
plain_names = st.from_regex(r"[a-z_][a-z0-9_]{0,7}", fullmatch=True)
plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), plain_strings),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(plain_names, inner, max_size=3)),
    max_leaves=6,
)
plain_calls = st.lists(
    st.builds(
        lambda name, args: ToolCall(function=FunctionCall(name=name, arguments=args)),
        st.sampled_from(sorted(NAMES)),
        st.dictionaries(plain_names, plain_values, max_size=3),
    ),
    min_size=1,
    max_size=3,
)


@st.composite
def valid_output(draw):
    """What a model following the format would write: optional text, then rendered calls."""
    fmt = draw(st.sampled_from(FORMATS))
    rendered = fmt.render_tool_calls(draw(calls))
    if fmt.name in ("hermes", "mixtral"):
        rendered = draw(st.sampled_from(["", "Let me check.\n", "<think>hmm</think>"])) + rendered
        if fmt.name == "mixtral" and draw(st.booleans()):
            rendered = rendered.replace("_", "\\_")
    return rendered


def lenient_form(call: ToolCall, form: str) -> str:
    """A call in one of the other forms Hermes-style models write (worker/formats/lenient.py)."""
    args = json.dumps(call.arguments, ensure_ascii=False)
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    if form == "function=":
        return f"<function={call.name}>{args}</function>"
    if form == "function name":
        return f'<function name="{call.name}">{args}</function>'
    if form == "fence":
        return f"```json\n{body}\n```"
    return f"<{form}>{body}</{form}>"


LENIENT_FORMS = ["function=", "function name", "fence", "tool", "tools", "response", "json", "function_call"]


@st.composite
def lenient_output(draw):
    """Hermes calls in the other forms, with text before them."""
    rendered = "\n".join(lenient_form(c, draw(st.sampled_from(LENIENT_FORMS))) for c in draw(calls))
    return draw(st.sampled_from(["", "Let me check.\n", "<think>hmm</think>"])) + rendered


@st.composite
def mutated_output(draw):
    text = draw(st.one_of(valid_output(), lenient_output()))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "truncate", "duplicate"]))
        i = draw(st.integers(0, len(text)))
        if op == "insert":
            text = text[:i] + draw(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3))) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)) :]
        elif op == "truncate":
            text = text[:i]
        else:
            text = text[:i] + text[i // 2 :]
    return text


def check_never_raises(text: str) -> None:
    for fmt in FORMATS:
        for names in (NAMES, None):
            out = fmt.parse(text, names)
            assert isinstance(out, ParsedOutput)
            assert isinstance(out.content, str)
            assert isinstance(out.truncated_call, bool)
            assert all(isinstance(e, str) and e for e in out.errors)
            assert not any(e.startswith("internal parser error") for e in out.errors), out.errors
            for c in out.tool_calls:
                assert isinstance(c, ToolCall) and c.id.startswith("call_")
                json.dumps(c.model_dump(), allow_nan=False)  # must be able to cross the wire
            if fmt.name == "hermes" and "<think>" not in text:  # a think draft may follow a tag
                assert_tags_left_in_content_are_prose(out.content)


def assert_tags_left_in_content_are_prose(content: str) -> None:
    """An opening tag stays in the content only when it was named in prose: no call object follows."""
    at = content.find("<tool_call>")
    while at != -1:
        after = content[at + len("<tool_call>") :].lstrip()
        if after.startswith("```"):
            after = after[3:].lstrip("jsonxmlJSONXML").lstrip()
        assert not after.startswith(("{", "[")), content
        at = content.find("<tool_call>", at + 1)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(random_text, st.text(max_size=200)))
def test_random_text_never_raises(text):
    check_never_raises(text)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated_output())
# a parameter's text that Python's json reads as -inf, which no JSON encoder may send (found by this test)
@example(text='<tool_call><function name="get_weather"><param name="0">-Infinity</param></function>')
def test_mutated_valid_outputs_never_raise(text):
    check_never_raises(text)


@settings(max_examples=300, deadline=None)
@given(original=calls, forms=st.lists(st.sampled_from(LENIENT_FORMS), min_size=3, max_size=3))
def test_unmutated_lenient_forms_parse_back_exactly(original, forms):
    text = "\n".join(lenient_form(c, form) for c, form in zip(original, forms, strict=False))
    out = FORMAT_TABLE["hermes"].parse(text, NAMES)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [(c.name, c.arguments) for c in original]
    assert out.errors == [] and out.content == ""


MARKERS = [f for f in FRAGMENTS if "<|" in f or "\uff5c" in f]


def _spells_a_marker(call: ToolCall) -> bool:
    text = json.dumps(call.function.arguments, ensure_ascii=False)
    return any(m in text for m in MARKERS)


@settings(max_examples=300, deadline=None)
@given(fmt=st.sampled_from(FORMATS), data=st.data())
def test_unmutated_outputs_parse_back_exactly(fmt, data):
    original = data.draw(plain_calls if isinstance(fmt, XmlCallFormat | Lfm2Format | Gemma4Format) else calls)
    # A model writes a format's markers as control tokens, never as text inside an argument (toolq
    # tokenizes untrusted text as plain text), so arguments that spell one cannot come back the same.
    assume(not any(_spells_a_marker(c) for c in original))
    out = fmt.parse(fmt.render_tool_calls(original), NAMES)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [(c.name, c.arguments) for c in original]
    assert out.errors == [] and not out.truncated_call
