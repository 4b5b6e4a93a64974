"""Affinity through two real worker processes (scripted engine, one slot each), live gateways and
the official openai package, on a real Redis: a follow-up chat completion whose messages extend an
earlier job's goes to the worker that ran the earlier job; when that worker is full, stalled past
the wait, or killed, the other worker runs it; a resumed pause goes back to its worker. The
placement rules themselves are pinned in tests/integration/test_affinity_store.py."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis as sync_redis

from gateway.settings import GatewaySettings
from store import keys
from store.records import JobRecord
from store.submission import Submission
from tests.integration.gateway_support import CALL_ZORBIX, LiveGateway, private_redis
from tests.support.workers import WorkerProcess, wait_free, write_rules

MODEL = "scripted"
CALL_LOOKUP = '<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>'
RULES = [("<tool_response>\n", "Done."), ("slowjob", CALL_ZORBIX), ("", CALL_LOOKUP)]
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a thing up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}
WAIT_MS = 1500  # the gateway's affinity wait for most tests
SLOW_TOOL_S = 4.0  # calculate_zorbix (tests.support.slow_tools) holds a worker's only slot this long


class Stack:
    def __init__(self, url: str):
        self.url = url
        self.r = sync_redis.Redis.from_url(url)
        rules = write_rules(RULES)
        env = {"TOOLQ_BENCH_TOOL_DELAY_S": str(SLOW_TOOL_S)}
        self.workers = [
            WorkerProcess(
                url, script=rules, name=MODEL, extra=("--slots", "1"), tools=("tests.support.slow_tools",), env=env
            )
            for _ in range(2)
        ]
        for w in self.workers:
            w.wait_ready()
        self.gw = LiveGateway(GatewaySettings(redis_url=url, fleet_cache_s=0, affinity_wait_ms=WAIT_MS)).start()
        self.gw_long = LiveGateway(GatewaySettings(redis_url=url, fleet_cache_s=0, affinity_wait_ms=60_000)).start()

    def client(self, gw: LiveGateway | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=(gw or self.gw).url + "/v1", api_key="none", max_retries=0, timeout=60)

    def record(self, job_id: str) -> JobRecord:
        return JobRecord.from_hash(job_id, self.r.hgetall(keys.job(job_id)))

    def started_ms(self, job_id: str) -> int:
        import json

        for _, f in self.r.xrange(keys.log(job_id)):
            ev = json.loads(f[b"e"])
            if ev["type"] == "started":
                return int(ev["ts"])
        raise AssertionError(f"job {job_id} never started")

    def stop(self) -> None:
        self.gw.stop()
        self.gw_long.stop()
        for w in self.workers:
            w.stop()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with private_redis() as url:
        s = Stack(url)
        try:
            yield s
        finally:
            s.stop()


def chat(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """One chat completion; returns (the toolq job behind it, the assistant's message)."""
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=[LOOKUP])
    completion = raw.parse()
    return raw.headers["x-toolq-job-id"], completion.choices[0].message.model_dump(exclude_none=True)


def first_turn(client: openai.OpenAI, i: int) -> tuple[str, list[dict[str, Any]]]:
    """A conversation's first turn, ended by a call of the caller's tool; returns (its job, the
    messages of the follow-up: the transcript and the tool's result)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {i}: what is x?"}]
    job, answer = chat(client, messages)
    assert answer["tool_calls"][0]["function"]["name"] == "lookup"
    call_id = answer["tool_calls"][0]["id"]
    return job, [*messages, answer, {"role": "tool", "tool_call_id": call_id, "content": f"x is {i}"}]


def occupy(stack: Stack, worker_id: str) -> str:
    """Fill the worker's only slot for SLOW_TOOL_S: a job offered to it first that runs the slow tool."""
    import asyncio

    from store.jobstore import JobStore
    from toolq.wire.protocol import JobRequest, Message

    async def go() -> str:
        store = JobStore.from_url(stack.url, fair=True, affinity_wait_ms=60_000)
        request = JobRequest(messages=[Message(role="user", content="slowjob")], tools=["calculate_zorbix"])
        job, _ = await store.submit(Submission(request, model=MODEL, prefer=worker_id))
        await store.close()
        return job

    job = asyncio.run(go())
    deadline = time.monotonic() + 20
    while stack.record(job).status.value != "running" or stack.record(job).worker != worker_id:
        assert time.monotonic() < deadline, "the slow job did not start on its worker"
        time.sleep(0.02)
    return job


def other(stack: Stack, worker_id: str) -> WorkerProcess:
    return next(w for w in stack.workers if w.worker_id != worker_id)


def test_follow_ups_go_to_the_worker_that_ran_the_earlier_turn(stack: Stack):
    # one slot each: a worker holds the conversation it ran last (worker/held.py), so each
    # conversation's follow-up comes right after its first turn
    client = stack.client()
    ran = set()
    for i in range(6):
        job, follow = first_turn(client, i)
        ran.add(stack.record(job).worker)
        wait_free(stack.r, MODEL, stack.record(job).worker)  # else placed 'fallback_full' while its load says full
        job2, answer = chat(client, follow)
        assert answer["content"] == "Done."
        rec, earlier = stack.record(job2), stack.record(job)
        assert (rec.prefer, rec.worker, rec.placed) == (earlier.worker, earlier.worker, "affinity")
    # /v1/models shows each worker's cache (as of its last heartbeat), and how jobs were placed
    deadline = time.monotonic() + 10
    while True:
        models = httpx.get(stack.gw.url + "/v1/models").json()["data"]
        view = next(m for m in models if m["id"] == MODEL)
        held = {c["worker"]: c["conversations"] for c in view["caches"]}
        if all(held.get(w) == 1 for w in ran) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {c["worker"] for c in view["caches"]} == {w.worker_id for w in stack.workers}
    assert all(held[w] == 1 for w in ran), held  # one slot: the conversation it ran last
    assert all(c["bytes"] == {} for c in view["caches"])  # the scripted engine reports no tiers
    assert view["placements"]["affinity"] >= 6
    assert "toolq_affinity_dispatches" in httpx.get(stack.gw.url + "/metrics").text


def test_a_follow_up_whose_worker_is_full_runs_on_the_other_at_once(stack: Stack):
    client = stack.client()
    job, follow = first_turn(client, 100)
    holder = stack.record(job).worker
    slow = occupy(stack, holder)
    t0 = time.time()
    job2, _ = chat(client, follow)
    rec = stack.record(job2)
    assert (rec.prefer, rec.placed, rec.worker) == (holder, "fallback_full", other(stack, holder).worker_id)
    assert stack.started_ms(job2) - t0 * 1000 < WAIT_MS, "a full worker's job is given up at once, not after the wait"
    wait_ended(stack, slow)  # the next test wants both workers free


def wait_ended(stack: Stack, job: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not stack.record(job).terminal:
        assert time.monotonic() < deadline, f"job {job} did not end"
        time.sleep(0.02)


def test_a_follow_up_whose_worker_stalls_runs_on_the_other_after_the_wait(stack: Stack):
    client = stack.client()
    job, follow = first_turn(client, 200)
    holder = stack.record(job).worker
    proc = next(w for w in stack.workers if w.worker_id == holder)
    os.kill(proc.proc.pid, signal.SIGSTOP)  # live in the registry (for its TTL) but asking for nothing
    try:
        t0 = time.time()
        job2, _ = chat(client, follow)
    finally:
        os.kill(proc.proc.pid, signal.SIGCONT)
    rec = stack.record(job2)
    assert (rec.prefer, rec.placed, rec.worker) == (holder, "fallback_wait", other(stack, holder).worker_id)
    waited = stack.started_ms(job2) - t0 * 1000
    assert WAIT_MS - 100 <= waited < WAIT_MS + 2000, waited


def test_a_resumed_pause_goes_back_to_its_worker(stack: Stack):
    jobs = []
    for i in range(4):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"pause {i}"}],
            "tools": [{**LOOKUP, "execution": "client"}],
        }
        r = httpx.post(stack.gw.url + "/v1/jobs", json=body)
        assert r.status_code in (200, 201, 202), r.text
        jobs.append(r.json()["job_id"])
    for job in jobs:
        deadline = time.monotonic() + 20
        while stack.record(job).status.value != "requires_action":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    paused_on = {job: stack.record(job).worker for job in jobs}
    assert set(paused_on.values()) == {w.worker_id for w in stack.workers}, "both workers ran first attempts"
    for worker in set(paused_on.values()):
        wait_free(stack.r, MODEL, worker)  # a paused job holds no slot, once its worker's load says so
    for job in jobs:
        call = stack.record(job).required_action.calls[0]
        r = httpx.post(f"{stack.gw.url}/v1/jobs/{job}/tool_results", json=[{"tool_call_id": call.id, "content": "ok"}])
        assert r.status_code == 200, r.text
    for job in jobs:
        wait_ended(stack, job)
        rec = stack.record(job)
        assert (rec.attempt, rec.prefer, rec.worker, rec.placed) == (2, paused_on[job], paused_on[job], "affinity")


def test_a_threads_next_run_goes_to_the_worker_that_ran_its_last(stack: Stack):
    http = httpx.Client(base_url=stack.gw.url, timeout=30)
    firsts = {}
    for i in range(4):  # first runs posted together, so both workers take some
        tid = http.post("/v1/threads", json={}).json()["id"]
        # the first run calls the caller's tool; answered, it ends with "Done."
        body = {"messages": [{"role": "user", "content": f"thread {i}"}], "tools": [{**LOOKUP, "execution": "client"}]}
        r = http.post(f"/v1/threads/{tid}/runs", json=body)
        assert r.status_code in (200, 201, 202), r.text
        firsts[tid] = r.json()["job_id"]
    for first in firsts.values():
        deadline = time.monotonic() + 20
        while stack.record(first).status.value != "requires_action":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    for first in firsts.values():
        call = stack.record(first).required_action.calls[0]
        r = http.post(f"/v1/jobs/{first}/tool_results", json=[{"tool_call_id": call.id, "content": "ok"}])
        assert r.status_code == 200, r.text
    for first in firsts.values():
        wait_ended(stack, first)
    ran = {tid: stack.record(first).worker for tid, first in firsts.items()}
    assert set(ran.values()) == {w.worker_id for w in stack.workers}, "both workers ran first runs"
    for tid, worker in ran.items():
        wait_free(stack.r, MODEL, worker)
        r = http.post(f"/v1/threads/{tid}/runs", json={"messages": [{"role": "user", "content": "and then?"}]})
        assert r.status_code in (200, 201, 202), r.text
        run = r.json()["job_id"]
        wait_ended(stack, run)
        rec = stack.record(run)
        assert (rec.prefer, rec.worker, rec.placed) == (worker, worker, "affinity")
    http.close()


def test_zz_a_follow_up_whose_worker_was_killed_runs_on_the_other(stack: Stack):
    # runs last in this module: it kills a worker
    client = stack.client(stack.gw_long)
    job, follow = first_turn(client, 300)
    holder = stack.record(job).worker
    proc = next(w for w in stack.workers if w.worker_id == holder)
    wait_free(stack.r, MODEL, holder)  # killed while its load still said full, it would be 'fallback_full'
    os.kill(proc.proc.pid, signal.SIGKILL)
    t0 = time.time()
    job2, _ = chat(client, follow)  # its registry entry outlives it by a few seconds
    rec = stack.record(job2)
    assert rec.worker == other(stack, holder).worker_id
    assert rec.placed in ("fallback_gone", "")  # '' once the gateway saw it gone: offered to nobody
    assert stack.started_ms(job2) - t0 * 1000 < 10_000, "not held for the 60 s wait"
