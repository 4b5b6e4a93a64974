"""POST /v1/jobs/{id}/tool_results and /approvals against a real Redis: every bad input is a 4xx
that names the problem, and the job is unchanged. Paused jobs are made in Redis as a worker leaves
them (the whole flow with a worker is in test_gateway_pause.py)."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from store import keys
from store.jobstore import JobStore
from store.submission import Submission
from tests.integration.gateway_support import asgi_client
from tests.support.pauses import paused_job, pending
from toolq.wire.limits import MAX_TOOL_RESULT_BYTES

A, B = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url)
    yield s
    await s.close()


@pytest.fixture
async def http(redis_url):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"key-a": "ta", "key-b": "tb"})
    async with asgi_client(settings) as c:
        yield c


async def state_of(store: JobStore, job_id: str) -> tuple:
    return await store.redis.hgetall(keys.job(job_id)), await store.redis.xlen(keys.log(job_id))


async def test_results_and_approvals_are_recorded_and_the_view_shows_what_is_left(http, store):
    job_id = await paused_job(store, pending("c1", "client"), pending("a1", "approval"), tenant="ta")
    view = (await http.get(f"/v1/jobs/{job_id}", headers=A)).json()
    assert view["status"] == "requires_action"
    assert [c["id"] for c in view["required_action"]["calls"]] == ["c1", "a1"]
    assert view["required_action"]["deadline_ms"] > 0

    r = await http.post(f"/v1/jobs/{job_id}/tool_results", json=[{"tool_call_id": "c1", "content": "r"}], headers=A)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "requires_action"
    assert [c["id"] for c in r.json()["required_action"]["calls"]] == ["a1"]

    r = await http.post(
        f"/v1/jobs/{job_id}/approvals", json=[{"tool_call_id": "a1", "approved": False, "reason": "no"}], headers=A
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "queued" and body["attempt"] == 2 and body["required_action"] is None


BAD_RESULTS = [
    ({"tool_call_id": "c1", "content": "x"}, 422, "invalid_request", None),  # an object, not a list
    ([], 422, "invalid_request", None),
    ([{"tool_call_id": "c1"}], 422, "invalid_request", "content"),
    ([{"tool_call_id": "c1", "content": 5}], 422, "invalid_request", "content"),
    ([{"tool_call_id": "c1", "content": "x", "extra": 1}], 422, "invalid_request", "extra"),
    ([{"tool_call_id": "", "content": "x"}], 422, "invalid_request", "tool_call_id"),
    ([{"tool_call_id": "c1", "content": "é" * (MAX_TOOL_RESULT_BYTES // 2 + 1)}], 422, "invalid_request", "bytes"),
    ([{"tool_call_id": "nope", "content": "x"}], 422, "unknown_tool_call", "'nope'"),
    ([{"tool_call_id": "a1", "content": "x"}], 422, "wrong_action_kind", "'a1'"),
    ([{"tool_call_id": "c1", "content": "x"}, {"tool_call_id": "c1", "content": "y"}], 422, "invalid_request", "twice"),
    ([{"tool_call_id": "c2", "content": "x"}, {"tool_call_id": "zz", "content": "y"}], 422, "unknown_tool_call", "zz"),
    ([{"tool_call_id": "done", "content": "x"}], 409, "already_answered", "'done'"),
]


@pytest.mark.parametrize(("body", "status", "code", "says"), BAD_RESULTS)
async def test_bad_tool_results_are_4xx_and_change_nothing(http, store, body, status, code, says):
    job_id = await paused_job(
        store, pending("c1", "client"), pending("c2", "client"), pending("a1", "approval"), pending("done", "client"),
        tenant="ta",
    )  # fmt: skip
    await store.answer_actions(job_id, [("done", {"content": "ok"})], "client")
    before = await state_of(store, job_id)
    r = await http.post(f"/v1/jobs/{job_id}/tool_results", json=body, headers=A)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    if says:
        assert says in error["message"]
    assert await state_of(store, job_id) == before


BAD_APPROVALS = [
    ([{"tool_call_id": "a1"}], 422, "invalid_request", "approved"),
    ([{"tool_call_id": "a1", "approved": "yes"}], 422, "invalid_request", "approved"),
    ([{"tool_call_id": "a1", "approved": True, "reason": "x" * 5000}], 422, "invalid_request", "reason"),
    ([{"tool_call_id": "c1", "approved": True}], 422, "wrong_action_kind", "/tool_results"),
    ([{"tool_call_id": "nope", "approved": True}], 422, "unknown_tool_call", "'nope'"),
]


@pytest.mark.parametrize(("body", "status", "code", "says"), BAD_APPROVALS)
async def test_bad_approvals_are_4xx_and_change_nothing(http, store, body, status, code, says):
    job_id = await paused_job(store, pending("c1", "client"), pending("a1", "approval"), tenant="ta")
    before = await state_of(store, job_id)
    r = await http.post(f"/v1/jobs/{job_id}/approvals", json=body, headers=A)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and says in r.json()["error"]["message"]
    assert await state_of(store, job_id) == before


async def test_another_tenant_and_unknown_jobs_are_404(http, store):
    job_id = await paused_job(store, pending("c1", "client"), tenant="ta")
    before = await state_of(store, job_id)
    body = [{"tool_call_id": "c1", "content": "x"}]
    for path in (f"/v1/jobs/{job_id}/tool_results", "/v1/jobs/job_nope/tool_results"):
        r = await http.post(path, json=body, headers=B if job_id in path else A)
        assert r.status_code == 404 and r.json()["error"]["code"] == "job_not_found"
    r = await http.post(f"/v1/jobs/{job_id}/tool_results", json=body)  # no key at all
    assert r.status_code == 401
    assert (await http.get(f"/v1/jobs/{job_id}", headers=B)).status_code == 404
    assert await state_of(store, job_id) == before


async def test_answers_to_a_queued_resumed_or_ended_job_are_409(http, store):
    body = [{"tool_call_id": "c1", "content": "x"}]
    queued, _ = await store.submit(
        Submission(
            (await store.request(await paused_job(store, pending("c1", "client"), tenant="ta"))), model="m", tenant="ta"
        )
    )
    r = await http.post(f"/v1/jobs/{queued}/tool_results", json=body, headers=A)
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_paused" and "is queued" in r.text

    job_id = await paused_job(store, pending("c1", "client"), tenant="ta")
    assert (await http.post(f"/v1/jobs/{job_id}/tool_results", json=body, headers=A)).status_code == 200
    r = await http.post(f"/v1/jobs/{job_id}/tool_results", json=body, headers=A)  # posted twice
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_paused"

    ended = await paused_job(store, pending("c1", "client"), tenant="ta")
    r = await http.post(f"/v1/jobs/{ended}/cancel", headers=A)
    assert r.json()["status"] == "cancelled"
    before = await state_of(store, ended)
    r = await http.post(f"/v1/jobs/{ended}/tool_results", json=body, headers=A)
    assert r.status_code == 409 and r.json()["error"]["code"] == "job_ended" and "cancelled" in r.text
    assert await state_of(store, ended) == before


async def test_a_caps_action_timeout(redis_url):
    from tests.integration.gateway_support import register_fake_worker

    register_fake_worker(redis_url, "m", [])
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, action_timeout_cap_s=60)
    async with asgi_client(settings) as c:
        job = {"messages": [{"role": "user", "content": "hi"}]}
        r = await c.post("/v1/jobs", json={**job, "action_timeout_s": 61})
        assert r.status_code == 422 and r.json()["error"]["field"] == "action_timeout_s"
        assert "above the limit of 60" in r.json()["error"]["message"]
        assert (await c.post("/v1/jobs", json={**job, "action_timeout_s": 60})).status_code == 202
