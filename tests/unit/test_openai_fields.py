"""The table of OpenAI request fields (gateway/openai/fields.py) against the installed openai
package's own request types, and each row's handling through the request models."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import BaseModel

from gateway.openai import fields
from gateway.openai.chat.request import ChatCompletionRequest
from gateway.openai.errors import OpenAIError
from gateway.openai.responses.request import ResponsesRequest

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_BODY = {"model": "m", "input": "hi"}

# A value of each OFF field that asks for something toolq does not do.
ASKING: dict[str, Any] = {
    "n": 2,
    "logprobs": True,
    "top_logprobs": 3,
    "top_p": 0.5,
    "frequency_penalty": 0.5,
    "presence_penalty": -1,
    "logit_bias": {"50256": -100},
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "x"},
    "functions": [{"name": "f", "parameters": {}}],
    "function_call": {"name": "f"},
    "reasoning_effort": "high",
    "verbosity": "low",
    "web_search_options": {"search_context_size": "low"},
    "include": ["message.output_text.logprobs"],
    "truncation": "auto",
    "reasoning": {"effort": "high"},
    "context_management": [{"type": "compaction"}],
    "max_tool_calls": 3,
    "prompt": {"id": "pmpt_1"},
    "moderation": {"model": "omni-moderation-latest"},
}

CASES = [
    (fields.CHAT, CompletionCreateParamsBase, ChatCompletionRequest, CHAT_BODY),
    (fields.RESPONSES, ResponseCreateParamsBase, ResponsesRequest, RESPONSES_BODY),
]
IDS = ["chat", "responses"]


def sdk_fields(params: Any) -> set[str]:
    # ``stream`` lives on the SDK's streaming / non-streaming subclasses, not on the base
    return set(params.__required_keys__) | set(params.__optional_keys__) | {"stream"}


def rows(table: dict[str, fields.Row], handling: str) -> list[str]:
    return sorted(name for name, f in table.items() if f.handling == handling)


@pytest.mark.parametrize(("table", "params", "model", "body"), CASES, ids=IDS)
def test_the_table_has_every_field_the_sdk_documents_and_no_other(table, params, model, body):
    # A failure here after an openai upgrade: give the new field a row in gateway/openai/fields.py.
    assert set(table) - {"toolq"} == sdk_fields(params)


@pytest.mark.parametrize(("table", "params", "model", "body"), CASES, ids=IDS)
def test_honoured_fields_are_declared_on_the_model_and_only_they(table, params, model: type[BaseModel], body):
    assert set(rows(table, fields.HONOURED)) == set(model.model_fields)


@pytest.mark.parametrize(("table", "params", "model", "body"), CASES, ids=IDS)
def test_hints_take_any_value_and_are_dropped(table, params, model, body):
    for name in rows(table, fields.HINT):
        for value in ("x", True, 7, {"a": 1}):
            assert model.model_validate({**body, name: value}).model_dump(exclude_none=True).keys() == body.keys()


@pytest.mark.parametrize(("table", "params", "model", "body"), CASES, ids=IDS)
def test_off_fields_accept_what_asks_for_nothing_and_refuse_the_rest_naming_the_field(table, params, model, body):
    for name in rows(table, fields.OFF):
        for value in (None, [], {}, "", *table[name].off):
            model.model_validate({**body, name: value})
        with pytest.raises(OpenAIError) as e:
            model.model_validate({**body, name: ASKING[name]})
        assert e.value.field == name and e.value.status == 400
        assert e.value.message.startswith(f"{name}: ") and "is not supported: " in e.value.message


def test_every_off_field_has_a_value_that_asks_for_something():
    assert set(ASKING) == set(rows(fields.CHAT, fields.OFF)) | set(rows(fields.RESPONSES, fields.OFF))


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (1.0, True),  # top_p 1.0 is the default 1
        (0.99, False),
        (True, False),  # true is not the number 1
    ],
)
def test_numbers_compare_as_json_numbers(value, accepted):
    try:
        ChatCompletionRequest.model_validate({**CHAT_BODY, "top_p": value})
    except OpenAIError:
        assert not accepted
    else:
        assert accepted


def test_nested_nothing_is_nothing():
    ResponsesRequest.model_validate({**RESPONSES_BODY, "reasoning": {"effort": None, "summary": None}})
    ResponsesRequest.model_validate({**RESPONSES_BODY, "reasoning": {"effort": "medium", "summary": None}})
    with pytest.raises(OpenAIError):
        ResponsesRequest.model_validate({**RESPONSES_BODY, "reasoning": {"effort": "none", "summary": "auto"}})


def test_an_unknown_field_is_still_refused_by_name():
    with pytest.raises(ValueError, match="frobnicate"):
        ChatCompletionRequest.model_validate({**CHAT_BODY, "frobnicate": 1})


def test_a_tool_call_sent_back_with_its_stream_index_makes_a_job():
    # the openai SDK's stream helper keeps each call's delta index; frameworks echo the turn as is
    from gateway.openai.chat.request import to_job

    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    req = ChatCompletionRequest.model_validate(
        {**CHAT_BODY, "messages": [*CHAT_BODY["messages"], {"role": "assistant", "tool_calls": [call]}]}
    )
    assert to_job(req).messages[1].tool_calls[0].arguments == {"a": 1}
