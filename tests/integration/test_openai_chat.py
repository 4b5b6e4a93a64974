"""POST /v1/chat/completions with the official openai SDK against a real gateway on a real port,
real Redis and a scripted worker process: the tool-call round trip, streaming, response_format,
the server-tool extension, and every refusal as the SDK's typed error."""

from __future__ import annotations

import json
import re
import time

import httpx
import openai
import pytest
import redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import CALL_ZORBIX, LiveGateway, private_redis
from tests.support.workers import WorkerProcess, write_rules
from tests.support.zorbix import ZORBIX

KEY = "oa-key"
RULES = [
    ("Reply in JSON", '{"city": "Paris", "population": 2100000}'),
    ("Say hello", "Hello there, friend!"),
    ("Compare", "So a < b, x[0] = {1} and <b>bold</b>."),
    ("Take your time", "Slowly " * 2000),
    ("<tool_response>\n", "The answer is 22."),
    ("", CALL_ZORBIX),
]
ASK = [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}]


@pytest.fixture(scope="module")
def live():
    with private_redis() as url:
        worker = WorkerProcess(url, script=write_rules(RULES, token_delay_s=0.002)).wait_ready()
        gw = LiveGateway(GatewaySettings(redis_url=url, api_keys={KEY: "acme"}, fleet_cache_s=0)).start()
        try:
            yield gw, url
        finally:
            gw.stop()
            worker.stop()


@pytest.fixture
def client(live):
    gw, _ = live
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=30) as c:
        yield c


def test_a_client_tool_call_comes_back_as_tool_calls_then_the_result_gives_the_answer(client):
    first = client.chat.completions.create(
        model="scripted", messages=ASK, tools=[ZORBIX], tool_choice="required", parallel_tool_calls=False
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and first.object == "chat.completion"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "calculate_zorbix"
    assert json.loads(call.function.arguments) == {"zorb": 15, "bix": 7}
    # the key the caller's effect goes by (docs/tools.md: Effects exactly once); sent back below, accepted
    assert re.fullmatch(r"fx_[0-9a-f]{32}", (call.model_extra or {})["toolq"]["effect_key"])
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens > 0

    second = client.chat.completions.create(
        model="scripted",
        messages=[
            *ASK,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "22"},
        ],
        tools=[ZORBIX],
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "The answer is 22." and not second.choices[0].message.tool_calls


def test_a_streamed_tool_call_is_assembled_by_the_sdk(client):
    with client.chat.completions.stream(
        model="scripted", messages=ASK, tools=[ZORBIX], tool_choice="required", stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "calculate_zorbix" and json.loads(call.function.arguments) == {"zorb": 15, "bix": 7}
    assert final.choices[0].finish_reason == "tool_calls"
    assert not final.choices[0].message.content  # the call's markup never streams as text
    assert final.usage is not None and final.usage.completion_tokens > 0
    deltas = [c for c in chunks if c.type == "tool_calls.function.arguments.delta"]
    assert len(deltas) > 1  # the arguments arrive in pieces


def _job_events(gw, job_id: str) -> list[dict]:
    with httpx.stream(
        "GET", f"{gw.url}/v1/jobs/{job_id}/events", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    ) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def test_a_required_call_streams_from_the_tokens_under_the_id_of_the_answer(live, client):
    """The call is written under a required grammar, so its deltas come from the token events as
    the model writes them (the worker's ``calls``), and the job's events and answer carry the
    same id; nothing is sent a second time from the final event."""
    gw, _ = live
    raw = client.chat.completions.with_raw_response.create(
        model="scripted", messages=ASK, tools=[ZORBIX], tool_choice="required", stream=True
    )
    job_id = raw.headers["X-Toolq-Job-Id"]
    chunks = list(raw.parse())
    heads = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or [] if tc.id]
    assert len(heads) == 1 and heads[0].index == 0 and heads[0].function.name == "calculate_zorbix"
    events = _job_events(gw, job_id)
    streamed = [d for e in events if e["type"] == "token" for d in e["data"].get("calls", [])]
    assert streamed[0]["id"] == heads[0].id and streamed[0]["name"] == "calculate_zorbix"
    assert json.loads("".join(d["arguments"] for d in streamed)) == {"zorb": 15, "bix": 7}
    final = next(e for e in events if e["type"] == "final")
    assert [c["id"] for c in final["data"]["tool_calls"]] == [heads[0].id]
    seq = {e["type"]: e["seq"] for e in events}
    first_delta = min(e["seq"] for e in events if e["type"] == "token" and e["data"].get("calls"))
    assert first_delta < seq["tool_call"] < seq["final"]  # streamed before the call was checked


def test_answer_text_with_brackets_streams_at_once_when_tools_are_offered(live):
    """``<``, ``[`` and ``{`` that cannot open a call in the worker's format (hermes) stream as
    the model writes them, not at the end."""
    gw, _ = live
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "Compare"}],
        "tools": [ZORBIX],
        "stream": True,
    }
    with httpx.stream(
        "POST", gw.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ) as r:
        job_id = r.headers["X-Toolq-Job-Id"]
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(d) for d in data[:-1]]
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"][0]["delta"].get("content")]
    assert "".join(contents) == "So a < b, x[0] = {1} and <b>bold</b>."
    assert len(contents) > 1
    tokens = [e["data"]["content"] for e in _job_events(gw, job_id) if e["type"] == "token"]
    assert "".join(tokens) == "So a < b, x[0] = {1} and <b>bold</b>."  # all of it from the tokens


def test_a_served_tools_call_never_streams_to_the_caller(client):
    stream = client.chat.completions.create(
        model="scripted", messages=ASK, stream=True, extra_body={"toolq": {"server_tools": ["calculate_zorbix"]}}
    )
    chunks = list(stream)
    assert not [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "The answer is 22."


def test_streamed_text_arrives_as_content_deltas_then_done(live):
    gw, _ = live
    body = {"model": "scripted", "messages": [{"role": "user", "content": "Say hello"}], "stream": True}
    with httpx.stream(
        "POST", gw.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "Hello there, friend!"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["object"] == "chat.completion.chunk"
    assert "usage" not in chunks[0]  # not asked for


def test_json_schema_response_format_gives_matching_json(client):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }
    out = client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "Reply in JSON: the biggest city of France"}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    )
    assert json.loads(out.choices[0].message.content) == {"city": "Paris", "population": 2100000}


def test_an_answer_that_breaks_the_schema_is_an_error_not_a_wrong_answer(client):
    schema = {"type": "object", "properties": {"city": {"type": "integer"}}, "required": ["city"]}
    with pytest.raises(openai.InternalServerError) as e:
        client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "Reply in JSON"}],
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
    assert "schema" in str(e.value.message)


def test_server_tools_run_in_the_full_loop_through_the_extension_field(client):
    out = client.chat.completions.create(
        model="scripted", messages=ASK, extra_body={"toolq": {"server_tools": ["calculate_zorbix"]}}
    )
    assert out.choices[0].message.content == "The answer is 22." and out.choices[0].finish_reason == "stop"


def test_refusals_are_the_sdks_typed_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-17", messages=ASK)
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="scripted", messages=ASK, tools=[ZORBIX], tool_choice="sometimes")
    assert e.value.body["param"] == "tool_choice" and e.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="scripted", messages=ASK, tools=[ZORBIX], tool_choice={"type": "function", "function": {"name": "x"}}
        )
    assert "'x'" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="scripted", messages=ASK, logit_bias={"50256": -100})
    assert e.value.body["param"] == "logit_bias" and "is not supported" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="scripted", messages=ASK, n=3)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
        )
    assert "text parts" in e.value.message
    # hints and "off" values are accepted
    out = client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}],
        n=1,
        top_p=1,
        store=False,
        user="u1",
        metadata={"team": "a"},
        prompt_cache_key="k",
        seed=3,
        stop=["zzz"],
    )
    assert out.choices[0].message.content == "Hello there, friend!"


def test_a_wrong_key_is_an_authentication_error(live):
    gw, _ = live
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as e:
            bad.chat.completions.create(model="scripted", messages=ASK)
    assert e.value.body["code"] == "invalid_api_key"


def test_a_full_queue_is_a_rate_limit_error_with_retry_after(redis_url):
    from tests.integration.gateway_support import register_fake_worker

    register_fake_worker(redis_url, "idle", [])  # a model whose queue nobody drains
    gw = LiveGateway(GatewaySettings(redis_url=redis_url, max_queue_depth=1, fleet_cache_s=0)).start()
    try:
        with openai.OpenAI(base_url=gw.url + "/v1", api_key="-", max_retries=0, timeout=2) as c:
            with pytest.raises(openai.APITimeoutError):
                c.chat.completions.create(model="idle", messages=ASK)  # stays queued: the queue is full now
            with pytest.raises(openai.RateLimitError) as e:
                c.chat.completions.create(model="idle", messages=ASK)
        assert e.value.response.headers["retry-after"] == "2"
    finally:
        gw.stop()


def _statuses(r: redis.Redis, marker: str) -> list[str]:
    """The statuses of the jobs whose request contains ``marker``."""
    out = []
    for key in r.scan_iter(keys.JOB_PREFIX + "*"):
        request, status = r.hmget(key, "request", "status")
        if request and marker.encode() in request:
            out.append(status.decode())
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_cancels_its_job(live, stream):
    gw, url = live
    marker = f"Take your time {stream}"
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": marker}],
        "max_tokens": 4000,
        "stream": stream,
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=0.5) as http:
        try:
            with http.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=headers) as resp:
                assert resp.status_code == 200
                next(resp.iter_lines())  # the role chunk: the job runs; then leave
        except httpx.ReadTimeout:
            assert not stream  # a non-streamed answer is still being written: leave
    r = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while _statuses(r, marker) != ["cancelled"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _statuses(r, marker) == ["cancelled"]
