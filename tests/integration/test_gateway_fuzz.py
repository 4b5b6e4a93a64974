"""Schemathesis against the gateway's own OpenAPI schema: no generated input, valid or not, gets a
5xx. Runs over real HTTP with Redis and a live scripted worker, so valid jobs really run."""

from __future__ import annotations

import asyncio
import json

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from gateway.app import create_app
from gateway.openai.errors import PREFIXES as OPENAI_PREFIXES
from gateway.settings import GatewaySettings
from store import keys
from store.deliveries import Deliveries
from store.jobstore import JobStore
from store.submission import Submission
from tests.integration.gateway_support import LiveGateway, private_redis
from tests.support.pauses import paused_job, pending
from tests.support.workers import WorkerProcess, write_rules
from toolq.webhooks.deliveries import Attempt
from toolq.webhooks.signing import new_secret
from toolq.wire.protocol import JobRequest, Message, now_ms

KEY = "fuzz-key"


@pytest.fixture(scope="module")
def redis_of_live():
    with private_redis() as url:
        yield url


@pytest.fixture(scope="module")
def live(redis_of_live):
    url = redis_of_live
    worker = WorkerProcess(url, script=write_rules([("", "ok")])).wait_ready()
    # Caps low enough that generated values cross them, a queue small enough to fill up. The
    # tenant has a webhook secret, so generated webhooks reach the address check.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOOLQ_WEBHOOK_SECRETS", json.dumps({"fuzz": [new_secret()]}))
        gw = LiveGateway(
            GatewaySettings(
                redis_url=url, api_keys={KEY: "fuzz"}, max_queue_depth=20, max_body_bytes=64 * 1024, keepalive_s=0.5
            )
        ).start()
    try:
        yield gw
    finally:
        gw.stop()
        worker.stop()


@pytest.fixture(scope="module")
def http(live):
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {KEY}"
        yield session


# The schema the gateway serves at /openapi.json, built without a server so that pytest can
# parametrize by operation at collection time (schemathesis' lazy fixture loader does not run
# on pytest 9); the calls go to the live gateway.
schema = schemathesis.openapi.from_dict(create_app(GatewaySettings()).openapi())


@schema.parametrize()
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_makes_the_gateway_answer_5xx(case, http, live):
    # An event stream of a job that exists follows it to its end: bound the wait.
    check(case.call(base_url=live.url, session=http, timeout=10), case)
    if case.method == "POST" and case.path == "/v1/jobs" and isinstance(case.body, dict):
        # Generated bodies rarely pass the fleet and protocol checks (random model and tool
        # names, any version, messages breaking rules a JSON schema cannot state): send the body
        # again made acceptable there, so odd metadata, seeds and keys reach the enqueue and the
        # worker too, and follow the job it made to its end.
        for name in ("model", "tools", "tool_choice", "version"):
            case.body.pop(name, None)
        first = (case.body.get("messages") or [None])[0]
        text = first.get("content") if isinstance(first, dict) else None
        case.body["messages"] = [{"role": "user", "content": text if isinstance(text, str) else "hi"}]
        response = case.call(base_url=live.url, session=http, timeout=10)
        check(response, case)
        if response.status_code in (200, 202):
            events = http.get(live.url + response.json()["links"]["events"], timeout=10)
            assert events.status_code == 200 and "event: queued" in events.text


def check(response, case) -> None:
    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:500])
    ctype = response.headers.get("content-type") or [""]  # schemathesis keeps every value of a header
    if response.status_code >= 400 and ctype[0].startswith("application/json"):
        error = response.json()["error"]
        # OpenAI's shape: code may be null
        if case.path.startswith(OPENAI_PREFIXES):
            assert error["type"] and error["message"] and "param" in error
        else:
            assert error["code"] and error["message"]


@pytest.fixture(scope="module")
def paused(live, redis_of_live):
    """A job of the fuzz tenant waiting on a client tool's result and on an approval."""

    async def make() -> str:
        store = JobStore.from_url(redis_of_live)
        try:
            return await paused_job(store, pending("call_c", "client"), pending("call_a", "approval"), tenant="fuzz")
        finally:
            await store.close()

    return asyncio.run(make())


answers = schema.include(path_regex=r"/(tool_results|approvals)$")


@answers.parametrize()
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_answer_to_a_paused_job_makes_the_gateway_answer_5xx(case, http, live, redis_of_live, paused):
    """Generated answers posted to a real paused job: never a 5xx, and a refused one changes nothing.
    Each body goes again naming a call the job really waits on, so odd contents reach the store."""
    import redis

    r = redis.Redis.from_url(redis_of_live)
    case.path_parameters = {"job_id": paused}
    tries = [None]
    if isinstance(case.body, list) and case.body and isinstance(case.body[0], dict):
        tries.append("call_c" if case.path.endswith("/tool_results") else "call_a")
    for call_id in tries:
        if call_id is not None:
            case.body[0]["tool_call_id"] = call_id
        before = r.hgetall(keys.job(paused)), r.xlen(keys.log(paused))
        response = case.call(base_url=live.url, session=http, timeout=10)
        check(response, case)
        if response.status_code != 200:
            assert (r.hgetall(keys.job(paused)), r.xlen(keys.log(paused))) == before
        assert r.hget(keys.job(paused), "status") in (b"requires_action", b"queued")


@pytest.fixture(scope="module")
def failed_delivery(live, redis_of_live):
    """A webhook delivery of the fuzz tenant in its dead-letter list, as the sender leaves one."""

    async def make() -> str:
        store = JobStore.from_url(redis_of_live)
        ds = Deliveries(store.redis)
        try:
            req = JobRequest(messages=[Message(role="user", content="hi")], webhook="https://example.com/hook")
            job_id, _ = await store.submit(Submission(req, model="m", tenant="fuzz"))
            await store.cancel(job_id)
            [claim] = await ds.claim(limit=1, lease_ms=60_000)
            await ds.settle(claim, "dead", Attempt(at_ms=now_ms(), duration_ms=1, status_code=500, error="HTTP 500"))
            return claim.delivery.id
        finally:
            await store.close()

    return asyncio.run(make())


webhook_routes = schema.include(path_regex=r"/webhooks")


@webhook_routes.parametrize()
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_about_a_real_delivery_makes_the_gateway_answer_5xx(case, http, live, failed_delivery):
    """The webhook routes, with generated input and then with the id of a real failed delivery."""
    check(case.call(base_url=live.url, session=http, timeout=10), case)
    if case.path_parameters and "delivery_id" in case.path_parameters:
        case.path_parameters = {**case.path_parameters, "delivery_id": failed_delivery}
        check(case.call(base_url=live.url, session=http, timeout=10), case)


threads = schema.include(path_regex=r"^/v1/(threads|conversations)/\{")


@threads.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_on_a_real_thread_makes_the_gateway_answer_5xx(case, http, live):
    """Generated input on a thread (and the same thread as a conversation) that exists, with a
    message in it, so paging, appends, runs and deletes reach the store: never a 5xx."""
    made = http.post(live.url + "/v1/threads", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    assert made.status_code == 201, made.text
    case.path_parameters = {
        **(case.path_parameters or {}),
        **{k: made.json()["id"] for k in ("thread_id", "conversation_id") if k in (case.path_parameters or {})},
    }
    check(case.call(base_url=live.url, session=http, timeout=10), case)
    if case.method == "POST" and case.path.endswith("/runs") and isinstance(case.body, dict):
        # as for /v1/jobs above: the body again, made acceptable to the fleet check, so it runs
        for name in ("model", "tools", "tool_choice", "version"):
            case.body.pop(name, None)
        case.body["messages"] = [{"role": "user", "content": "hi"}]
        check(case.call(base_url=live.url, session=http, timeout=10), case)
