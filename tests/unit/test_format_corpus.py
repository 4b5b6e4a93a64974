"""The real chat templates llama.cpp ships: each one's format detected from its source, and a call
rendered through the template parsed back, the same call, by the detected format.

The round trip renders the user turn with the generation prompt, then the same turn plus an
assistant turn with the call; what the second adds is what the model would have generated.
Templates that cannot render tool calls get the call in the format's own syntax (as the worker's
adapter writes it), so every detected template still round-trips.
"""

from __future__ import annotations

import json

import pytest

from tests.support.corpus import corpus_dir
from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats import FORMATS, get_format
from worker.formats.detect import detect_format
from worker.templates import ChatTemplate

# Every corpus template and the format its source names (None: the template renders no tool
# calls of a syntax any format here writes; the worker falls back to hermes with a warning).
EXPECTED = {
    "Apertus-8B-Instruct.jinja": "apertus",
    "Apriel-1.6-15b-Thinker-fixed.jinja": "apriel",
    "Bielik-11B-v3.0-Instruct.jinja": "hermes",
    "ByteDance-Seed-OSS.jinja": "seed_oss",
    "Cohere2MoE.jinja": "command_r7b",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "command_r",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "command_r7b",
    "GLM-4.6.jinja": "glm",
    "GLM-4.7-Flash.jinja": "glm",
    "GigaChat3-10B-A1.8B.jinja": "gigachat3",
    "GigaChat3.1-10B-A1.8B.jinja": "gigachat",
    "HuggingFaceTB-SmolLM3-3B.jinja": None,  # no tool markup in the template
    "Kimi-K2-Instruct.jinja": "kimi_k2",
    "Kimi-K2-Thinking.jinja": "kimi_k2",
    "Kimi-K3.jinja": "kimi_k3",
    "LFM2-8B-A1B.jinja": "lfm2",
    "LFM2.5-8B-A1B.jinja": "lfm2",
    "LFM2.5-Instruct.jinja": "lfm2",
    "MiMo-VL.jinja": "hermes",
    "MiniMax-M1.jinja": "minimax_m1",
    "MiniMax-M2.jinja": "minimax_m2",
    "MiniMax-M3.jinja": None,  # its own ]<]minimax[>[ delimiters: not written here yet
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral_args",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "qwen3_coder",
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron_v2",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    "Qwen-QwQ-32B.jinja": "hermes",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "Qwen-Qwen3-0.6B.jinja": "hermes",
    "Qwen3-Coder.jinja": "qwen3_coder",
    "Qwen3.5-4B.jinja": "qwen3_coder",
    "Reka-Edge.jinja": "hermes",
    "Spark2.5.jinja": "glm",
    "StepFun3.5-Flash.jinja": "qwen3_coder",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "deepseek_r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek_r1",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek_v3_1",
    "deepseek-ai-DeepSeek-V3.2.jinja": "deepseek_v3_2",
    "deepseek-ai-DeepSeek-V4-Flash-0731.jinja": "deepseek_v4",
    "deepseek-ai-DeepSeek-V4.jinja": "deepseek_v4",
    "fireworks-ai-llama-3-firefunction-v2.jinja": "firefunction",
    "google-gemma-2-2b-it.jinja": None,  # no tools
    "google-gemma-4-31B-it-interleaved.jinja": "gemma4",
    "google-gemma-4-31B-it.jinja": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite",
    "ibm-granite-granite-4.0.jinja": "hermes",
    "ibm-granite-granite-4.1.jinja": "hermes",
    "inclusionai-ling-3.0-flash.jinja": "glm",
    "llama-cpp-deepseek-r1.jinja": "deepseek_r1",
    "llama-cpp-rwkv-world.jinja": None,  # no tools
    "meetkai-functionary-medium-v3.1.jinja": "functionary_v3_1",
    "meetkai-functionary-medium-v3.2.jinja": "functionary_v3_2",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3",
    "microsoft-Phi-3.5-mini-instruct.jinja": None,  # no tools
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "mistral_args",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "moonshotai-Kimi-K2.jinja": "kimi_k2",
    "muse-glimmer.jinja": None,  # harmony-like <atem:function_calls>: one template, not written here yet
    "openai-gpt-oss-120b.jinja": "gpt_oss",
    "openbmb-MiniCPM5-1B.jinja": "minicpm",
    "poolside-Laguna-S-2.1.jinja": "glm",
    "poolside-Laguna-XS-2.1.jinja": "glm",
    "poolside-Laguna-XS.2.jinja": "glm",
    "tencent-Hy3.jinja": "hunyuan",
    "unsloth-Apriel-1.5.jinja": "apriel",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral_args",
    "upstage-Solar-Open-100B.jinja": "solar",
}

# Templates that do not render the conversation yet; the template robustness work (adapting
# context variables as llama.cpp's minja polyfills do) makes them render. Strict: once they do,
# the mark must go.
# Round trips that still fail to render with this test's tool (left for a follow-up): Command R+
# reads a description on every parameter, which this tool's parameters lack; llama.cpp's own
# DeepSeek R1 template dumps a generator with tojson for two-argument calls.
RENDER_PENDING = {
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "'dict object' has no attribute 'description'",
    "llama-cpp-deepseek-r1.jinja": "a generator is not JSON serializable",
}
# Templates that refuse, or drop, a second call in one turn: their models call one tool at a time.
ONE_CALL_PER_TURN = {
    "GigaChat3-10B-A1.8B.jinja",
    "GigaChat3.1-10B-A1.8B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "openai-gpt-oss-120b.jinja",
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city"],
            },
        },
    }
]
# Strings with quotes, braces and a closing tag: nothing in them may be taken for markup.
CALLS = [
    ("get_weather", {"city": 'Paris "x" & {y} </b>', "days": 3, "tags": ["a", "b"]}),
    ("get_weather", {"city": "Rome"}),
]
USER = [{"role": "user", "content": "What is the weather?"}]


def test_every_corpus_template_is_in_the_table():
    assert sorted(p.name for p in corpus_dir().glob("*.jinja")) == sorted(EXPECTED)


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_detects_the_format_of_each_template(filename):
    source = (corpus_dir() / filename).read_text(encoding="utf-8")
    assert detect_format(source) == EXPECTED[filename]


def test_detected_formats_are_registered():
    assert {f for f in EXPECTED.values() if f} <= set(FORMATS)


def generated_part(template: ChatTemplate, calls: list[tuple[str, dict]], fmt_name: str) -> str:
    """What a model answering the user turn with these calls generates, as the template writes it."""
    caps = template.capabilities
    prompt = template.render_raw(USER, tools=TOOLS, add_generation_prompt=True)
    if caps.tool_calls:
        listed = [
            {
                "id": f"abcDEF12{i}",  # Mistral's templates want 9 alphanumerics
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a) if caps.tool_call_arguments_as_string else a},
            }
            for i, (n, a) in enumerate(calls)
        ]
        turn = {"role": "assistant", "content": "" if caps.tool_call_content_empty_string else None}
        turn["tool_calls"] = listed
    else:
        inline = get_format(fmt_name).render_tool_calls(
            [ToolCall(function=FunctionCall(name=n, arguments=a)) for n, a in calls]
        )
        turn = {"role": "assistant", "content": inline}
    full = template.render_raw([*USER, turn], tools=TOOLS, add_generation_prompt=False)
    if full.startswith(prompt):
        return full[len(prompt) :]
    # The generation prompt differs from the rendered turn's opening (a "<think>" the template adds
    # only when generating): the turn starts after the last markup both share.
    k = 0
    while k < min(len(prompt), len(full)) and prompt[k] == full[k]:
        k += 1
    while k > 0 and full[k - 1] not in ">\n]":
        k -= 1
    return full[k:]


def _round_trip_cases():
    for filename, fmt_name in sorted(EXPECTED.items()):
        if fmt_name is None:
            continue
        for n in (1, 2):
            if n == 2 and filename in ONE_CALL_PER_TURN:
                continue
            marks = []
            if filename in RENDER_PENDING:
                marks.append(pytest.mark.xfail(reason=RENDER_PENDING[filename], strict=True))
            yield pytest.param(filename, fmt_name, n, id=f"{filename}-{n}call", marks=marks)


@pytest.mark.parametrize(("filename", "fmt_name", "n_calls"), list(_round_trip_cases()))
def test_calls_round_trip_through_the_real_template(filename, fmt_name, n_calls):
    template = ChatTemplate.from_file(corpus_dir() / filename, bos_token="<s>", eos_token="</s>")
    calls = CALLS[:n_calls]
    text = generated_part(template, calls, fmt_name)
    out = get_format(fmt_name).parse(text, {"get_weather"})
    assert [(c.name, c.arguments) for c in out.tool_calls] == calls, text
    assert out.errors == [] and not out.truncated_call, text
