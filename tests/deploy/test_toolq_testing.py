"""The toolq.testing example of docs/testing.md, as it stands there (tests/unit/test_deploy.py checks
that the page shows this file's code): a service's test against a real toolq stack in containers,
the model scripted by two rules."""

import openai
import pytest

from toolq.testing import Rule

CALL = '<tool_call>{"name": "calculate_zorbix", "arguments": {"zorb": 15, "bix": 7}}</tool_call>'


@pytest.fixture(scope="module")
def toolq_rules():
    # The first rule whose pattern is in the prompt gives the model's reply: once a tool result is
    # in the conversation (the Hermes template wraps it in <tool_response>, newline), the answer.
    return [Rule("<tool_response>\n", "The zorbix of 15 and 7 is 22."), Rule("zorbix", CALL)]


def test_a_job_runs_the_tool_and_answers(toolq_client, toolq_stack):
    job_id = toolq_client.submit(
        messages=[{"role": "user", "content": "What is the zorbix of 15 and 7?"}],
        tools=["calculate_zorbix"],  # served by the worker (worker/demo_tools.py)
        model=toolq_stack.model,
    )
    result = toolq_client.result(job_id, timeout=60)
    assert result.content == "The zorbix of 15 and 7 is 22."
    assert [m.content for m in result.messages if m.role == "tool"] == ["22"]


def test_the_openai_sdk_sees_the_tool_call(toolq_stack):
    client = openai.OpenAI(base_url=toolq_stack.openai_base_url, api_key=toolq_stack.api_key)
    zorbix = {"type": "function", "function": {"name": "calculate_zorbix", "parameters": {"type": "object"}}}
    reply = client.chat.completions.create(
        model=toolq_stack.model, messages=[{"role": "user", "content": "zorbix of 15 and 7?"}], tools=[zorbix]
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.choices[0].message.tool_calls[0].function.name == "calculate_zorbix"
