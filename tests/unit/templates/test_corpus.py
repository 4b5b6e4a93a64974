"""Every template of the real corpus (tests/support/corpus.py) renders a tool conversation whole.

The reference conversation (a question, a call, its result, the answer) goes through each
template with the format detected from its source (hermes when none is), adapted to what the
template can render; every fact must be in the prompt, and the untrusted-text segments must still
join to it.
"""

from __future__ import annotations

import functools

import pytest

from tests.support.corpus import corpus_path, corpus_templates
from tests.support.seed import SEED_TOOLS
from tests.unit.templates.conversations import ANSWER, QUESTION, RESULT, check_segments, seed_messages
from worker.formats import FORMATS, get_format
from worker.formats.detect import detect_format
from worker.templates import ChatTemplate

FACTS = (QUESTION, "superSecretTool", "2535", "32222000403", RESULT, ANSWER)


@functools.cache  # probed once per template, as a worker does
def corpus_template(name: str) -> ChatTemplate:
    return ChatTemplate.from_file(corpus_path(name), bos_token="<s>", eos_token="</s>")


def format_for(template: ChatTemplate):
    detected = detect_format(template.source)
    return get_format(detected if detected in FORMATS else "hermes")


@pytest.mark.parametrize("name", corpus_templates())
def test_corpus_template_renders_every_fact(name):
    template = corpus_template(name)
    prompt = template.render(seed_messages(), tools=SEED_TOOLS, fmt=format_for(template), add_generation_prompt=False)
    missing = [fact for fact in FACTS if fact not in prompt.text]
    assert not missing, f"{name} lost {missing}"
    check_segments(prompt)


@pytest.mark.parametrize("name", corpus_templates())
def test_corpus_template_renders_a_generation_prompt(name):
    # The loop's own render: the conversation so far, ending where the model writes next.
    template = corpus_template(name)
    prompt = template.render(seed_messages()[:3], tools=SEED_TOOLS, fmt=format_for(template))
    assert RESULT in prompt.text and "superSecretTool" in prompt.text


# ---------------------------------------------------------------- the three that needed help


def test_firefunction_gets_functions_and_datetime():
    template = corpus_template("fireworks-ai-llama-3-firefunction-v2.jinja")
    assert template.context.functions and template.context.datetime
    prompt = template.render(seed_messages(), tools=SEED_TOOLS, fmt=get_format("hermes"), add_generation_prompt=False)
    assert '"name": "superSecretTool"' in prompt.text and "Today is " in prompt.text


def test_command_r_plus_gets_an_empty_tool_list_when_none_is_offered():
    template = corpus_template("CohereForAI-c4ai-command-r-plus-tool_use.jinja")
    assert template.context.tools_list
    assert "## Available Tools" in template.render_raw([{"role": "user", "content": "hi"}])


def test_qwq_gets_empty_content_on_earlier_call_turns():
    # QwQ splits the content of every assistant turn but the last: a null content fails there.
    template = corpus_template("Qwen-QwQ-32B.jinja")
    assert template.capabilities.tool_calls and template.capabilities.tool_call_content_empty_string


def test_a_missing_corpus_fails_with_a_clear_message(monkeypatch, tmp_path):
    from tests.support import corpus

    monkeypatch.setenv(corpus.ENV, str(tmp_path))
    assert corpus.corpus_templates() == [corpus.MISSING]
    with pytest.raises(corpus.CorpusMissing, match=r"Run scripts/setup\.sh"):
        corpus.corpus_path(corpus.MISSING)
