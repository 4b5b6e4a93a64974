"""The agent frameworks whose own loop cannot require a tool call, run against a real gateway and
a real worker process on the scripted engine (worker/scripted.py): a LangGraph prebuilt ReAct
agent, and pydantic-ai with plain and with structured output.

Why scripted: the bundled model is small and in ``auto`` mode often answers without calling.
LangGraph's prebuilt agent sends the same tool_choice on every step, so requiring the tool would
loop forever; pydantic-ai refuses a static ``tool_choice='required'`` for the same reason. The
scripted engine writes the call, then the answer once it reads the tool's result, so what is
tested is everything else: the fields each framework sends, its parsing of toolq's answers, its
own tool function run with the model's arguments, and the loop's end (tests/e2e/test_frameworks.py
runs the frameworks that can require a tool on the real model)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from tests.integration.framework_stack import live_stack
from tests.integration.gateway_support import CALL_ZORBIX
from tests.support.frameworks import QUESTION, RESULT, Zorbix
from tests.support.workers import write_rules

MODEL = "scripted"
ANSWER = "The zorbix of 15 and 7 is 22."
RULES = [
    # pydantic-ai's structured output is a call of its output tool, offered beside the function;
    # the rule fires only once the function's result (22) is in the conversation
    (
        "(?s)final_result.*<tool_response>\n22\n",
        '<tool_call>{"name": "final_result", "arguments": {"zorbix": 22}}</tool_call>',
    ),
    ("<tool_response>\n22\n", ANSWER),
    ("", CALL_ZORBIX),
]


@pytest.fixture(scope="module")
def stack():
    with live_stack(MODEL, script=write_rules(RULES)) as s:
        yield s


def test_langgraph_prebuilt_react_agent(stack):
    from langchain_core.tools import tool as lc_tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    tool = Zorbix()
    llm = ChatOpenAI(model=stack.model, base_url=stack.base_url, api_key=stack.key, max_retries=0, timeout=30)
    agent = create_react_agent(llm, [lc_tool(tool.fn, parse_docstring=True)])
    state = agent.invoke({"messages": [("user", QUESTION)]}, {"recursion_limit": 6})
    assert tool.ran_once_with_the_question_s_numbers()
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    assert state["messages"][-1].content == ANSWER


def pydantic_ai_model(stack):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(stack.model, provider=OpenAIProvider(base_url=stack.base_url, api_key=stack.key))


async def test_pydantic_ai_plain_output(stack):
    from pydantic_ai import Agent

    tool = Zorbix()
    agent = Agent(pydantic_ai_model(stack), tools=[tool.fn])
    result = await agent.run(QUESTION)
    assert tool.ran_once_with_the_question_s_numbers()
    assert result.output == ANSWER


class ZorbixAnswer(BaseModel):
    zorbix: int


async def test_pydantic_ai_structured_output(stack):
    from pydantic_ai import Agent

    tool = Zorbix()
    agent = Agent(pydantic_ai_model(stack), tools=[tool.fn], output_type=ZorbixAnswer)
    result = await agent.run(QUESTION)
    assert tool.ran_once_with_the_question_s_numbers()
    assert result.output == ZorbixAnswer(zorbix=RESULT)
