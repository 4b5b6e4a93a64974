# ruff: noqa: RUF001 - DeepSeek's markers are spelled with fullwidth bars (U+FF5C).
"""The formats of the template families (worker/formats/detect.py): what each writes, its grammar
accepts, and what each parser reads from real model output, byte for byte."""

from __future__ import annotations

import pytest

from tests.support.gbnf_match import accepts
from tests.support.seed import SEED_TOOLS
from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats import get_format

# Every format added for the template families (the four older ones have tests/unit/test_formats.py).
FAMILY_FORMATS = [
    "qwen3_coder",
    "seed_oss",
    "glm",
    "minimax_m2",
    "minimax_m1",
    "deepseek_r1",
    "deepseek_v3_1",
    "deepseek_v3_2",
    "deepseek_v4",
    "llama3",
    "mistral",
    "mistral_args",
    "functionary_v3_1",
    "functionary_v3_2",
    "kimi_k2",
    "gpt_oss",
    "granite",
    "command_r",
    "command_r7b",
    "nemotron_v2",
    "apriel",
    "gigachat",
    "apertus",
    "firefunction",
    "solar",
    "minicpm",
    "hunyuan",
    "lfm2",
    "gemma4",
    "kimi_k3",
    "gigachat3",
]
# Families whose models write one call per turn (the template renders only the first).
SINGLE_CALL = {"llama3", "gigachat", "gigachat3", "gpt_oss"}

TOOLS = SEED_TOOLS + [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"enum": ["c", "f"]},
                    "days": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "no_params"}},
]
NAMES = {"superSecretTool", "say", "get_weather", "no_params"}


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(function=FunctionCall(name=name, arguments=arguments))


CALLS = [
    call("superSecretTool", a=2535, b=32222000403),
    call("say", text='He said "hi" & {left} </b>'),
    call("get_weather", city="Köln", unit="c", tags=["x", "y"]),
]


def pairs(calls):
    return [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("name", FAMILY_FORMATS)
def test_registered_under_its_own_name(name):
    assert get_format(name).name == name


@pytest.mark.parametrize("name", FAMILY_FORMATS)
def test_rendered_calls_parse_back_exactly(name):
    fmt = get_format(name)
    calls = CALLS[:1] if name in SINGLE_CALL else CALLS
    out = fmt.parse(fmt.render_tool_calls(calls), NAMES)
    assert pairs(out.tool_calls) == pairs(calls)
    assert out.errors == [] and not out.truncated_call and out.content == ""


@pytest.mark.parametrize("name", FAMILY_FORMATS)
def test_required_grammar_accepts_the_rendered_calls(name):
    fmt = get_format(name)
    calls = CALLS[:1] if name in SINGLE_CALL else CALLS
    assert accepts(fmt.grammar(TOOLS, required=True), fmt.render_tool_calls(calls))
    assert accepts(fmt.call_grammar(TOOLS), fmt.render_tool_calls(CALLS[1:2]))
    # a call of a tool that is not offered is not a sentence of the grammar
    assert not accepts(fmt.grammar(TOOLS, required=True), fmt.render_tool_calls([call("rm_rf", path="/")]))


@pytest.mark.parametrize("name", [n for n in FAMILY_FORMATS if get_format(n).trigger])
def test_lazy_grammar_starts_at_the_trigger(name):
    fmt = get_format(name)
    rendered = fmt.render_tool_calls(CALLS[:1])
    assert fmt.trigger and rendered.startswith(fmt.trigger)
    assert accepts(fmt.grammar(TOOLS), "Let me check. " + rendered)
    assert accepts(fmt.grammar(TOOLS), "Just an answer.")


@pytest.mark.parametrize("name", FAMILY_FORMATS)
def test_system_prompt_shows_the_syntax(name):
    fmt = get_format(name)
    prompt = fmt.system_prompt(TOOLS)
    assert "superSecretTool" in prompt and "tool_name" in prompt


@pytest.mark.parametrize("name", FAMILY_FORMATS)
def test_plain_answers_stay_content(name):
    text = 'The answer is 42. {"name": "unknown", "x": 1} and <b>bold</b>.'
    out = get_format(name).parse(text, NAMES)
    assert out.tool_calls == [] and out.errors == []
    assert out.content == text


# ---------------------------------------------------------------- what real models of each family write


@pytest.mark.parametrize(
    ("name", "text", "expected", "content"),
    [
        (
            "qwen3_coder",
            "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            [("get_weather", {"city": "São Paulo", "days": 3})],
            "I'll look.",
        ),
        (
            "qwen3_coder",
            "<tool_call>\n<function=say>\n<parameter=text>\nline one\n  line two <b>\n</parameter>\n</function>\n</tool_call>",
            [("say", {"text": "line one\n  line two <b>"})],
            "",
        ),
        (
            "llama3",
            '<|python_tag|>{"name": "say", "parameters": {"text": "hi"}}<|eom_id|>',
            [("say", {"text": "hi"})],
            "",
        ),
        ("llama3", '{"name": "say", "parameters": {"text": "hi"}}', [("say", {"text": "hi"})], ""),
        (
            "mistral",
            '[TOOL_CALLS][{"name": "say", "arguments": {"text": "a"}, "id": "abcDEF123"}, '
            '{"name": "say", "arguments": {"text": "b"}}]</s>',
            [("say", {"text": "a"}), ("say", {"text": "b"})],
            "",
        ),
        ("mistral", '[TOOL_CALLS]say[ARGS]{"text": "a"}', [("say", {"text": "a"})], ""),
        (
            "mistral_args",
            '[TOOL_CALLS]say[CALL_ID]abcDEF123[ARGS]{"text": "a"}[TOOL_CALLS]say[ARGS]{"text": "b"}',
            [("say", {"text": "a"}), ("say", {"text": "b"})],
            "",
        ),
        (
            "functionary_v3_1",
            'Sure <function=say>{"text": "</function> inside"}</function>',
            [("say", {"text": "</function> inside"})],
            "Sure",
        ),
        (
            "functionary_v3_1",
            "<|python_tag|>print('hi')\n<|eom_id|>",
            [("python", {"code": "print('hi')\n"})],
            "",
        ),
        (
            "functionary_v3_2",
            'all\nLet me call it.>>>say\n{"text": "a >>>b"}>>>get_weather\n{"city": "Oslo"}',
            [("say", {"text": "a >>>b"}), ("get_weather", {"city": "Oslo"})],
            "Let me call it.",
        ),
        (
            "deepseek_r1",
            "<think>maybe say?</think>\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>say\n"
            '```json\n{"text": "a"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            [("say", {"text": "a"})],
            "",
        ),
        (
            "deepseek_v3_1",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>say<｜tool▁sep｜>{"text": "a"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            [("say", {"text": "a"})],
            "",
        ),
        (
            "deepseek_v3_2",
            '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="city" string="true">42</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
            [("get_weather", {"city": "42", "days": 2})],
            "",
        ),
        (
            "gpt_oss",
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
            [("get_weather", {"city": "Oslo"})],
            "",
        ),
        (
            "gpt_oss",
            "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4",
            [],
            "4",
        ),
        (
            "kimi_k2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.say:0<|tool_call_argument_begin|>"
            '{"text": "a"}<|tool_call_end|><|tool_calls_section_end|>',
            [("say", {"text": "a"})],
            "",
        ),
        (
            "glm",
            "<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",
            [("get_weather", {"city": "Oslo"})],
            "",
        ),
        (
            "command_r7b",
            "<|START_THINKING|>I should call say.<|END_THINKING|><|START_ACTION|>[\n"
            '    {"tool_call_id": "0", "tool_name": "say", "parameters": {"text": "a"}}\n]<|END_ACTION|>',
            [("say", {"text": "a"})],
            "",
        ),
        (
            "command_r",
            'Action: ```json\n[\n    {\n        "tool_name": "say",\n        "parameters": {"text": "a"}\n    }\n]\n```',
            [("say", {"text": "a"})],
            "",
        ),
        ("granite", '<|tool_call|>[{"name": "say", "arguments": {"text": "a"}}]', [("say", {"text": "a"})], ""),
        (
            "lfm2",
            "<|tool_call_start|>[get_weather(city='Oslo <|tool_call_end|>', days=2, tags=['a']), say(text=\"b\")]"
            "<|tool_call_end|>Checking.",
            [("get_weather", {"city": "Oslo <|tool_call_end|>", "days": 2, "tags": ["a"]}), ("say", {"text": "b"})],
            "Checking.",
        ),
        (
            "gemma4",
            '<|channel>thought\nweather?<channel|><|tool_call>call:get_weather{city:<|"|>Oslo, "N" {x}<|"|>,'
            'days:2,tags:[<|"|>a<|"|>],unit:<|"|>c<|"|>}<tool_call|>',
            [("get_weather", {"city": 'Oslo, "N" {x}', "days": 2, "tags": ["a"], "unit": "c"})],
            "",
        ),
    ],
)
def test_reads_what_the_family_writes(name, text, expected, content):
    out = get_format(name).parse(text, NAMES)
    assert pairs(out.tool_calls) == expected
    assert out.errors == [] and not out.truncated_call
    assert out.content == content


def test_llama3_bare_json_must_name_an_offered_tool():
    fmt = get_format("llama3")
    text = '{"name": "weather report", "parameters": {"city": "Oslo"}}'
    assert fmt.parse(text, NAMES).tool_calls == []
    assert fmt.parse(text, NAMES).content == text
    assert fmt.parse('{"city": "Oslo"}', NAMES).content == '{"city": "Oslo"}'


@pytest.mark.parametrize("name", [n for n in FAMILY_FORMATS if n not in ("llama3",)])
def test_a_cut_call_is_truncated_not_content(name):
    fmt = get_format(name)
    rendered = fmt.render_tool_calls([call("say", text="a long sentence that was cut")])
    cut = rendered[: rendered.index("cut") + 2]
    out = fmt.parse(cut, NAMES)
    assert out.tool_calls == []
    assert out.truncated_call, out
