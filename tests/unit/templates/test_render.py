"""Rendering the maintained templates with the real formats: the reference conversation, hermes3."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.seed import SEED_TOOLS
from tests.unit.templates.conversations import (
    ALL_TEMPLATES,
    ANSWER,
    QUESTION,
    RESULT,
    check_segments,
    render,
    seed_messages,
)
from toolq.wire.protocol import Message
from worker.formats import get_format
from worker.templates import TEMPLATES_DIR, ChatTemplate, available_templates

# (template, format, prompt variant): the pairs the maintained templates were written for.
SEED_COMBOS = [
    ("mistral_instruct_v0_1", "thoughtful_steps", None),
    ("mistral_instruct_v0_1", "mixtral", None),
    ("functionary_v2_2", "functionary_v2", None),
    ("hermes_2_pro_mistral", "hermes", "short"),
    ("hermes_2_pro_mistral", "hermes", "long"),
    ("hermes_2_pro_mistral", "hermes", "hermes_2_pro"),
    ("hermes_2_pro_mistral", "thoughtful_steps", None),
    ("llama2", "hermes", None),
    ("llama2", "thoughtful_steps", None),
]


# ---------------------------------------------------------------- the bundled files


def test_bundled_templates_are_all_there():
    assert set(ALL_TEMPLATES) <= set(available_templates())


def test_hermes3_file_is_the_seed_without_table_borders():
    source = (TEMPLATES_DIR / "hermes3_tool_calling.j2").read_text()
    assert not any(line.startswith("|") for line in source.splitlines())
    assert source.startswith("{# ====")
    assert "{% set _tools = tools | default([], true) %}" in source


# ---------------------------------------------------------------- the reference conversation


@pytest.mark.parametrize("template,fmt,variant", SEED_COMBOS)
def test_seed_conversation_renders_with_every_part(template, fmt, variant):
    prompt = render(template, seed_messages(), fmt, prompt_variant=variant, add_generation_prompt=False)
    for needle in (QUESTION, "superSecretTool", "2535", "32222000403", RESULT, ANSWER):
        assert needle in prompt.text, needle
    check_segments(prompt)


@pytest.mark.parametrize("template,fmt,variant", SEED_COMBOS)
def test_seed_conversation_up_to_the_tool_result_asks_for_the_next_turn(template, fmt, variant):
    prompt = render(template, seed_messages()[:3], fmt, prompt_variant=variant, add_generation_prompt=True)
    for needle in (QUESTION, "superSecretTool", "2535", "32222000403", RESULT):
        assert needle in prompt.text, needle
    assert ANSWER not in prompt.text
    check_segments(prompt)
    generation_prompt = {
        "hermes_2_pro_mistral": "<|im_start|>assistant\n",
        "functionary_v2_2": "<|from|>assistant\n<|recipient|>",
        "mistral_instruct_v0_1": " [/INST]",  # no generation prompt: the turn just ends
        "llama2": " [/INST]",
    }[template]
    assert prompt.text.endswith(generation_prompt)


@pytest.mark.parametrize("fmt_name", ["mixtral", "thoughtful_steps"])
def test_mistral_prompt_is_the_seed_shape(fmt_name):
    """The shape the Mistral template was written for: one [INST] per user turn, calls inline, the result as a user turn; the tool
    instructions open the first user turn since there is no system role."""
    fmt = get_format(fmt_name)
    msgs = seed_messages()
    prompt = render("mistral_instruct_v0_1", msgs, fmt_name)
    calls = fmt.render_tool_calls(msgs[1].tool_calls)
    result = fmt.render_tool_result("superSecretTool", "call_531873", RESULT)
    final = fmt.render_final(ANSWER) if hasattr(fmt, "render_final") else ANSWER
    system = fmt.system_prompt(SEED_TOOLS)
    expected = f"<s>[INST] {system}\n\n{QUESTION} [/INST]{calls}</s>[INST] {result} [/INST]{final}</s>"
    assert prompt.text == expected


def test_mistral_without_tools_is_the_seed_prompt_exactly_but_for_the_format():
    fmt = get_format("thoughtful_steps")
    msgs = seed_messages()
    prompt = render("mistral_instruct_v0_1", msgs, "thoughtful_steps", tools=[])
    calls = fmt.render_tool_calls(msgs[1].tool_calls)
    final = fmt.render_final(ANSWER)
    expected = (
        f"<s>[INST] {QUESTION} [/INST]{calls}</s>"
        f"[INST] [TOOL(name=superSecretTool, id=call_531873)]{RESULT}[/TOOL] [/INST]{final}</s>"
    )
    assert prompt.text == expected


def test_llama2_prompt_is_the_seed_shape():
    fmt = get_format("hermes")
    msgs = seed_messages()
    prompt = render("llama2", msgs, "hermes", prompt_variant="short")
    calls = fmt.render_tool_calls(msgs[1].tool_calls)
    result = fmt.render_tool_result("superSecretTool", "call_531873", RESULT)
    system = fmt.system_prompt(SEED_TOOLS, "short")
    expected = (
        f"<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{QUESTION} [/INST] {calls} </s>"
        f"<s>[INST] {result} [/INST] {ANSWER} </s>"
    )
    assert prompt.text == expected


def test_functionary_renders_calls_natively_with_string_arguments():
    prompt = render("functionary_v2_2", seed_messages(), "functionary_v2")
    assert (
        '<|from|>assistant\n<|recipient|>superSecretTool\n<|content|>{"a": 2535, "b": 32222000403}<|stop|>'
        in prompt.text
    )
    # The template labels the result with the tool's name and adds no wrapper of its own.
    assert f"<|from|>superSecretTool\n<|recipient|>all\n<|content|>{RESULT}\n" in prompt.text
    assert prompt.text.startswith("<|from|>system\n<|recipient|>all\n<|content|>// Supported function definitions")


def test_tool_message_without_a_name_takes_it_from_the_call():
    msgs = seed_messages()
    msgs[2] = Message(role="tool", tool_call_id="call_531873", content=RESULT)
    prompt = render("functionary_v2_2", msgs, "functionary_v2")
    assert f"<|from|>superSecretTool\n<|recipient|>all\n<|content|>{RESULT}" in prompt.text


def test_hermes_2_pro_wraps_results_and_writes_calls_inline():
    prompt = render("hermes_2_pro_mistral", seed_messages(), "hermes", prompt_variant="long")
    text = prompt.text
    assert text.startswith("<|im_start|>system\nCall one or more functions")
    assert f"<|im_start|>tool\n<tool_response>\n{RESULT}\n</tool_response><|im_end|>\n" in text
    call = re.search(r"<\|im_start\|>assistant\n<tool_call>\n(.*?)\n</tool_call><\|im_end\|>", text, re.S)
    assert json.loads(call.group(1)) == {"name": "superSecretTool", "arguments": {"a": 2535, "b": 32222000403}}


# ---------------------------------------------------------------- hermes3_tool_calling.j2


def test_hermes3_renders_the_seed_conversation():
    prompt = render("hermes3_tool_calling", seed_messages(), "hermes")
    text = prompt.text
    lines = text.splitlines()
    assert "<|im_start|>system" in lines
    assert (
        "You are a function-calling AI model. If tools are provided in <tools></tools>, "
        "you may call them to help the user." in lines
    )
    assert f"<tools>\n{json.dumps(SEED_TOOLS, ensure_ascii=False)}\n</tools>\n<|im_end|>" in text
    assert f"<|im_start|>user\n{QUESTION}<|im_end|>" in text
    assert f"<|im_start|>tool\n<tool_response>\n{RESULT}\n</tool_response>\n<|im_end|>" in text
    assert f"<|im_start|>assistant\n{ANSWER}<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    # The template wraps tool content itself: the format's wrapper must not be added again.
    assert text.count("<tool_response>\n") == 1
    check_segments(prompt)


def test_hermes3_output_is_plain_chatml_without_blank_lines():
    # Blank lines between turns made SmolLM2 echo the <tool_response> instead of answering.
    text = render("hermes3_tool_calling", seed_messages(), "hermes").text
    assert text.startswith("<|im_start|>system\n")
    assert "\n\n" not in text
    assert text.count("<|im_end|>\n<|im_start|>") == text.count("<|im_start|>") - 1


def test_hermes3_tool_calls_parse_back_as_json():
    prompt = render("hermes3_tool_calling", seed_messages(), "hermes")
    blocks = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", prompt.text, re.S)
    assert [json.loads(b) for b in blocks] == [{"name": "superSecretTool", "arguments": {"a": 2535, "b": 32222000403}}]
    # And the hermes parser reads the assistant turn back into the same call.
    turn = prompt.text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    parsed = get_format("hermes").parse(turn, {"superSecretTool", "say"})
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("superSecretTool", {"a": 2535, "b": 32222000403})]


def test_hermes3_arguments_with_quotes_and_markup_stay_valid_json():
    args = {"text": 'say "hi" </tool_call> & <b>bold</b>\nnext line', "n": [1, 2.5, None, True]}
    msgs = [
        Message(role="user", content="go"),
        Message.model_validate(
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "function": {"name": "say", "arguments": json.dumps(args)}}],
            }
        ),
    ]
    prompt = render("hermes3_tool_calling", msgs, "hermes", add_generation_prompt=False)
    block = re.search(r"<tool_call>\n(.*?)\n</tool_call>\n<\|im_end\|>", prompt.text, re.S).group(1)
    assert json.loads(block) == {"name": "say", "arguments": args}


def test_tojson_is_plain_json_not_html_escaped():
    tools = [{"type": "function", "function": {"name": "f", "description": "a < b && it's > c", "parameters": {}}}]
    prompt = render("hermes3_tool_calling", [Message(role="user", content="x")], "hermes", tools=tools)
    assert "a < b && it's > c" in prompt.text
    assert "\\u003c" not in prompt.text and "&lt;" not in prompt.text
    t = ChatTemplate("{{ x | tojson(indent=2) }}|{{ 'é' | tojson }}")
    assert t._template.render(x={"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}|"é"'


def test_hermes3_without_tools_has_no_tools_block():
    prompt = render("hermes3_tool_calling", [Message(role="user", content="hello")], "hermes", tools=[])
    assert "<tools>\n" not in prompt.text
    assert "<|im_start|>user\nhello<|im_end|>" in prompt.text


@pytest.mark.parametrize("template", ["hermes3_tool_calling", "hermes_2_pro_mistral", "functionary_v2_2"])
def test_earlier_iterations_are_a_prefix_of_later_ones(template):
    """The engine reuses the evaluated prefix between loop iterations; adaptation must keep the
    rendering of a conversation a prefix of the rendering of its continuation."""
    fmt = {"functionary_v2_2": "functionary_v2"}.get(template, "hermes")
    msgs = seed_messages()
    shorter = render(template, msgs[:3], fmt, add_generation_prompt=False).text
    longer = render(template, msgs, fmt, add_generation_prompt=False).text
    assert longer.startswith(shorter)
