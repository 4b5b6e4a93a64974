"""The Responses API with the official openai SDK against a real gateway, Redis and a scripted
worker: background create, retrieve, cancel, function calls continued with
previous_response_id, streaming and its resume from a sequence number, tenants."""

from __future__ import annotations

import json
import time

import openai
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import CALL_ZORBIX, private_redis, served
from tests.support.workers import write_rules
from tests.support.zorbix import ZORBIX_RESPONSES as ZORBIX

KEYS = {"oa-key": "acme", "other-key": "globex"}
RULES = [
    ("Say hello", "Hello there, friend!"),
    ("Take your time", "Slowly " * 2000),
    ("<tool_response>\n", "The answer is 22."),
    ("", CALL_ZORBIX),
]


@pytest.fixture(scope="module")
def gateway():
    with private_redis() as url:
        settings = GatewaySettings(redis_url=url, api_keys=KEYS, fleet_cache_s=0)
        with served(url, settings, script=write_rules(RULES, token_delay_s=0.002)) as gw:
            yield gw


@pytest.fixture
def client(gateway):
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="oa-key", max_retries=0, timeout=30) as c:
        yield c


def wait_done(client: openai.OpenAI, response_id: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while True:
        r = client.responses.retrieve(response_id)
        if r.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def test_background_response_completes_and_another_is_cancelled(client):
    created = client.responses.create(model="scripted", input="Say hello", background=True, instructions="Be brief.")
    # a free worker may have picked it up already
    assert created.status in ("queued", "in_progress") and created.background and created.id.startswith("resp_")
    done = wait_done(client, created.id)
    assert done.status == "completed" and done.output_text == "Hello there, friend!"
    assert done.usage.output_tokens > 0 and done.instructions == "Be brief."

    slow = client.responses.create(model="scripted", input="Take your time", background=True, max_output_tokens=4000)
    time.sleep(0.3)
    cancelled = client.responses.cancel(slow.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(slow.id).status == "cancelled"


def test_a_function_call_then_its_output_with_previous_response_id(client):
    first = client.responses.create(
        model="scripted", input="Calculate the zorbix of 15 and 7", tools=[ZORBIX], tool_choice="required"
    )
    assert first.status == "completed"
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "calculate_zorbix" and json.loads(call.arguments) == {"zorb": 15, "bix": 7}
    second = client.responses.create(
        model="scripted",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "22"}],
        tools=[ZORBIX],
    )
    assert second.output_text == "The answer is 22." and second.previous_response_id == first.id


def test_input_items_carry_the_whole_conversation(client):
    out = client.responses.create(
        model="scripted",
        input=[
            {"role": "user", "content": "Calculate the zorbix of 15 and 7"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "calculate_zorbix",
                "arguments": '{"zorb": 15, "bix": 7}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "22"},
        ],
        tools=[ZORBIX],
    )
    assert out.output_text == "The answer is 22."


def test_a_stream_resumes_after_a_sequence_number(client):
    events = list(client.responses.create(model="scripted", input="Say hello", stream=True, background=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello there, friend!"
    rid = events[0].response.id
    again = list(client.responses.retrieve(rid, stream=True, starting_after=2))
    assert [e.sequence_number for e in again] == list(range(3, len(events)))
    assert [e.type for e in again] == types[3:]


def test_a_streamed_function_call(client):
    events = list(
        client.responses.create(
            model="scripted", input="zorbix of 15 and 7", tools=[ZORBIX], tool_choice="required", stream=True
        )
    )
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"zorb": 15, "bix": 7}
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == done.arguments
    assert not any(e.type == "response.output_text.delta" for e in events)


def test_a_required_function_call_streams_as_written_under_the_answers_call_id(client):
    """Written under a required grammar, the call is added and its arguments stream from the
    token events, before the final event; the completed response names the same call."""
    events = list(
        client.responses.create(
            model="scripted", input="zorbix of 15 and 7", tools=[ZORBIX], tool_choice="required", stream=True
        )
    )
    types = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "calculate_zorbix" and added.output_index == 0
    assert types.count("response.function_call_arguments.delta") > 1  # the model's pieces
    completed = events[-1].response
    assert completed.status == "completed" and [o.call_id for o in completed.output] == [added.item.call_id]
    assert types.index("response.output_item.added") < types.index("response.function_call_arguments.done")


def test_another_tenants_response_is_not_found(client, gateway):
    mine = client.responses.create(model="scripted", input="Say hello", background=True)
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="other-key", max_retries=0) as other:
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.cancel(mine.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.create(model="scripted", input="x", previous_response_id=mine.id)


def test_refusals_are_typed_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="scripted", input="x", reasoning={"effort": "high"})
    assert e.value.body["param"] == "reasoning"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="scripted", input=[{"type": "web_search_call", "id": "x"}])
    assert e.value.body["param"] == "input[0]"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nope")
