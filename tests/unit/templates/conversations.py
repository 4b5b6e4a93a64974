"""The reference conversation and helpers shared by the chat template tests."""

from __future__ import annotations

import copy
from itertools import pairwise

from tests.support.seed import SEED_TOOLS
from toolq.wire.protocol import Message
from worker.formats import get_format
from worker.templates import TEMPLATES_DIR, ChatTemplate

QUESTION = "Add two numbers for the purpose of this test."
ANSWER = "The sum of 2535 and 32222000403 is 42."
RESULT = "32222002938"

# The reference conversation the maintained templates were written for (tools in
# tests/support/seed.py): a question, one call, its result and the answer, with the null fields
# an OpenAI-style client sends.
SEED_MESSAGES = [
    {"role": "user", "name": None, "tool_call_id": None, "content": QUESTION, "tool_calls": None},
    {
        "role": "assistant",
        "name": None,
        "tool_call_id": None,
        "content": None,
        "tool_calls": [
            {
                "id": "call_531873",
                "type": "function",
                "function": {"name": "superSecretTool", "arguments": {"a": 2535, "b": 32222000403}},
            }
        ],
    },
    {"role": "tool", "name": "superSecretTool", "tool_call_id": "call_531873", "content": RESULT, "tool_calls": None},
    {"role": "assistant", "name": None, "tool_call_id": None, "content": ANSWER, "tool_calls": None},
]

ALL_TEMPLATES = ["hermes3_tool_calling", "mistral_instruct_v0_1", "functionary_v2_2", "hermes_2_pro_mistral", "llama2"]


def seed_messages() -> list[Message]:
    return [Message.model_validate(copy.deepcopy(m)) for m in SEED_MESSAGES]


def load(name: str) -> ChatTemplate:
    # Llama-2 and Mistral GGUFs carry these special tokens.
    return ChatTemplate.from_file(TEMPLATES_DIR / f"{name}.j2", bos_token="<s>", eos_token="</s>")


def render(name, messages, fmt="hermes", tools=SEED_TOOLS, **kw):
    return load(name).render(messages, tools=tools, fmt=get_format(fmt), **kw)


def trusted_text(prompt) -> str:
    return "".join(piece for piece, trusted in prompt.segments if trusted)


def untrusted_pieces(prompt) -> list[str]:
    return [piece for piece, trusted in prompt.segments if not trusted]


def check_segments(prompt) -> None:
    assert "".join(piece for piece, _ in prompt.segments) == prompt.text
    assert all(piece for piece, _ in prompt.segments), "no empty segments"
    kinds = [trusted for _, trusted in prompt.segments]
    assert all(a != b for a, b in pairwise(kinds)), "neighbours of the same kind are merged"
    assert "\ufdd0" not in prompt.text and "\ufdd1" not in prompt.text


HERMES_2_PRO = ChatTemplate.from_file(TEMPLATES_DIR / "hermes_2_pro_mistral.j2")
HERMES = get_format("hermes")
