"""Client-executed tools and approvals through the whole stack: a real gateway on a port, a real
scripted worker process (one job at a time), Redis. The job pauses holding no worker, the caller
answers over HTTP or with the SDK, and the job resumes from its checkpoint to `final`."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import CALL_ZORBIX, LiveGateway, private_redis
from tests.support.pauses import GATED_ZORBIX, client_tool, wait_status
from tests.support.workers import WorkerProcess, write_rules
from toolq import Client, SyncClient

CALL_LOOKUP = '<tool_call>{"name": "lookup_user", "arguments": {"user": "ann"}}</tool_call>'
RULES = [
    ("refused by the user: too costly", "I was not allowed to compute it."),
    ("<tool_response>\nann is an admin", "Ann is an admin."),
    ("<tool_response>\nlookup failed", "I could not look her up."),
    ("<tool_response>\n22", "The answer is 22."),
    ("<tool_response>\n", "Something else came back."),
    ("Who is ann", CALL_LOOKUP),
    ("zorbix of 15 and 7", CALL_ZORBIX),
    ("", "Hello there."),
]
LOOKUP = client_tool("lookup_user", "Look a user up in the caller's directory", "user")
ASK_ANN = {"messages": [{"role": "user", "content": "Who is ann?"}], "tools": [LOOKUP]}
ASK_ZORBIX = {"messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}], "tools": [GATED_ZORBIX]}


@pytest.fixture(scope="module")
def stack():
    with private_redis() as url:
        worker = WorkerProcess(url, script=write_rules(RULES), extra=("--max-jobs", "1")).wait_ready()
        gateway = LiveGateway(GatewaySettings(redis_url=url, fleet_cache_s=0, keepalive_s=0.5)).start()
        try:
            yield gateway
        finally:
            gateway.stop()
            worker.stop()


@pytest.fixture
async def http(stack):
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as c:
        yield c


async def submit(http: httpx.AsyncClient, body: dict) -> str:
    r = await http.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


async def events_of(http: httpx.AsyncClient, job_id: str) -> list[dict]:
    from tests.integration.test_gateway import sse_events

    return sse_events((await http.get(f"/v1/jobs/{job_id}/events")).text)


async def test_a_client_tool_pauses_the_job_and_the_posted_result_resumes_it(http):
    job_id = await submit(http, ASK_ANN)
    view = await wait_status(http, job_id, "requires_action")
    [call] = view["required_action"]["calls"]
    assert (call["name"], call["arguments"], call["kind"], call["where"]) == (
        "lookup_user",
        {"user": "ann"},
        "client",
        "client",
    )

    # the paused job holds no worker: with one job at a time, another job runs to its end meanwhile
    other = await submit(http, {"messages": [{"role": "user", "content": "hello"}]})
    assert (await wait_status(http, other, "succeeded"))["result"]["content"] == "Hello there."
    assert (await http.get(f"/v1/jobs/{job_id}")).json()["status"] == "requires_action"

    r = await http.post(
        f"/v1/jobs/{job_id}/tool_results", json=[{"tool_call_id": call["id"], "content": "ann is an admin"}]
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] in ("queued", "running", "succeeded") and r.json()["attempt"] == 2
    view = await wait_status(http, job_id, "succeeded")
    assert view["result"]["content"] == "Ann is an admin."
    tool_msgs = [m for m in view["result"]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_msgs] == [(call["id"], "ann is an admin")]

    events = await events_of(http, job_id)
    kinds = [e["type"] for e in events]
    assert kinds == [
        "queued",
        "started",
        "tool_call",
        "requires_action",
        "queued",
        "started",
        "tool_result",
        "final",
    ]
    assert events[2]["data"]["awaiting"] == "client" and events[2]["data"]["where"] == "client"
    assert events[3]["data"]["calls"][0]["id"] == call["id"]
    assert events[4]["data"] == {"attempt": 2, "resumed": "requires_action"}
    assert events[6]["data"]["where"] == "client" and events[6]["data"]["content"] == "ann is an admin"

    r = await http.post(f"/v1/jobs/{job_id}/tool_results", json=[{"tool_call_id": call["id"], "content": "again"}])
    assert r.status_code == 409 and r.json()["error"]["code"] == "job_ended"


async def test_an_error_result_reaches_the_model(http):
    job_id = await submit(http, ASK_ANN)
    [call] = (await wait_status(http, job_id, "requires_action"))["required_action"]["calls"]
    body = [{"tool_call_id": call["id"], "content": "lookup failed: directory down", "is_error": True}]
    assert (await http.post(f"/v1/jobs/{job_id}/tool_results", json=body)).status_code == 200
    assert (await wait_status(http, job_id, "succeeded"))["result"]["content"] == "I could not look her up."
    result_event = next(e for e in await events_of(http, job_id) if e["type"] == "tool_result")
    assert result_event["data"]["ok"] is False


async def test_an_approved_call_runs(http):
    job_id = await submit(http, ASK_ZORBIX)
    [call] = (await wait_status(http, job_id, "requires_action"))["required_action"]["calls"]
    assert (call["name"], call["kind"], call["where"]) == ("calculate_zorbix", "approval", "worker")
    r = await http.post(f"/v1/jobs/{job_id}/approvals", json=[{"tool_call_id": call["id"], "approved": True}])
    assert r.status_code == 200, r.text
    view = await wait_status(http, job_id, "succeeded")
    assert view["result"]["content"] == "The answer is 22."
    result_event = next(e for e in await events_of(http, job_id) if e["type"] == "tool_result")
    assert result_event["data"]["executed"] is True and result_event["data"]["content"] == "22"


async def test_a_denied_call_does_not_run_and_the_model_is_told_why(http):
    job_id = await submit(http, ASK_ZORBIX)
    [call] = (await wait_status(http, job_id, "requires_action"))["required_action"]["calls"]
    body = [{"tool_call_id": call["id"], "approved": False, "reason": "too costly"}]
    assert (await http.post(f"/v1/jobs/{job_id}/approvals", json=body)).status_code == 200
    view = await wait_status(http, job_id, "succeeded")
    assert view["result"]["content"] == "I was not allowed to compute it."
    result_event = next(e for e in await events_of(http, job_id) if e["type"] == "tool_result")
    assert result_event["data"]["executed"] is False and "too costly" in result_event["data"]["error"]


async def test_an_unanswered_pause_ends_with_action_timeout(http):
    job_id = await submit(http, {**ASK_ANN, "action_timeout_s": 0.3})
    await wait_status(http, job_id, "requires_action")
    view = await wait_status(http, job_id, "failed", timeout=10)
    assert view["result"]["error"]["code"] == "action_timeout"
    assert view["required_action"] is None
    assert (await events_of(http, job_id))[-1]["data"]["code"] == "action_timeout"


async def test_cancel_ends_a_paused_job(http):
    job_id = await submit(http, ASK_ANN)
    await wait_status(http, job_id, "requires_action")
    r = await http.post(f"/v1/jobs/{job_id}/cancel")
    assert r.json()["status"] == "cancelled"
    assert (await events_of(http, job_id))[-1]["type"] == "cancelled"


def lookup_user(user: str) -> str:
    """Look a user up in the caller's directory.

    Args:
        user: the user's login
    """
    return {"ann": "ann is an admin"}[user]


async def test_the_sdk_runs_the_callers_functions_and_asks_about_approvals(stack):
    asked = []

    async def approve(call):
        asked.append(call.name)
        return True

    async with Client(stack.url) as client:
        result = await client.run("Who is ann?", client_tools=[lookup_user], timeout=30)
        assert result.content == "Ann is an admin."
        result = await client.run("Calculate the zorbix of 15 and 7", tools=[GATED_ZORBIX], approve=approve, timeout=30)
        assert result.content == "The answer is 22." and asked == ["calculate_zorbix"]
        # no approver: denied
        result = await client.run("Calculate the zorbix of 15 and 7", tools=[GATED_ZORBIX], timeout=30)
        assert result.content == "Something else came back."


def test_the_sync_sdk_runs_them_too(stack):
    def deny(call):
        return False, "too costly"

    with SyncClient(stack.url) as client:
        assert client.run("Who is ann?", client_tools={"lookup_user": lookup_user}, timeout=30).content == (
            "Ann is an admin."
        )
        result = client.run("Calculate the zorbix of 15 and 7", tools=[GATED_ZORBIX], approve=deny, timeout=30)
        assert result.content == "I was not allowed to compute it."
        job_id = client.submit("Who is ann?", tools=[LOOKUP])
        while client.job(job_id).status.value != "requires_action":
            time.sleep(0.05)
        [call] = client.job(job_id).required_action.calls
        view = client.submit_tool_results(job_id, [{"tool_call_id": call.id, "content": "ann is an admin"}])
        assert view.attempt == 2
        assert client.result(job_id, timeout=30).content == "Ann is an admin."
