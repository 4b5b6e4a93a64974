"""Webhooks end to end, with real processes: a gateway, a scripted worker, the sender
(`toolq webhooks`) and a receiver in another process that verifies every delivery with the
`standardwebhooks` package (tests/support/webhook_receiver.py), on a private Redis.

The sender runs with the setting that allows private addresses (the receiver is on 127.0.0.1) and
a retry schedule in fractions of a second."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from store import keys
from store.deliveries import Deliveries
from store.jobstore import JobStore
from store.submission import Submission
from tests.integration.gateway_support import LiveGateway, private_redis
from tests.integration.gateway_support import wait_for as eventually
from tests.support.processes import REPO, ToolqProcess
from tests.support.workers import WorkerProcess, write_rules
from toolq import SyncClient
from toolq.local import free_port
from toolq.webhooks.signing import new_secret
from toolq.wire.protocol import EventType, JobRequest, JobStatus, Message, Webhook, now_ms

NEW, OLD = new_secret(), new_secret()  # a rotation in progress: every delivery carries both signatures
SECRETS = json.dumps({"default": [NEW, OLD]})
SENDER_ENV = {
    "TOOLQ_WEBHOOK_SECRETS": SECRETS,
    "TOOLQ_WEBHOOK_ALLOW_PRIVATE": "true",
    "TOOLQ_WEBHOOK_FIRST_RETRY_S": "0.2",
    "TOOLQ_WEBHOOK_MAX_RETRY_S": "0.5",
    "TOOLQ_WEBHOOK_GIVE_UP_AFTER_S": "30",
    "TOOLQ_WEBHOOK_TIMEOUT_S": "3",
    "TOOLQ_WEBHOOK_LEASE_S": "3.5",
}


class SenderProcess(ToolqProcess):
    def __init__(self, redis_url: str, **env: str):
        self.metrics_port = free_port()
        super().__init__(
            [sys.executable, "-m", "toolq", "webhooks", "--redis", redis_url, "--metrics-port", str(self.metrics_port)],
            what="webhook sender",
            log_name="webhooks",
            env={**SENDER_ENV, **env},
        )

    def wait_ready(self, timeout: float = 30.0) -> SenderProcess:
        deadline = time.monotonic() + timeout
        while "webhook sender started" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"webhook sender did not start:\n{self.output()}")
            time.sleep(0.05)
        return self


class Receiver:
    def __init__(self, tmp: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "received.jsonl"
        self.log.touch()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.webhook_receiver", str(self.port), str(self.log), NEW, OLD],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "receiver ready"

    def received(self, msg_id: str | None = None) -> list[dict]:
        lines = [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]
        return [x for x in lines if msg_id is None or x["id"] == msg_id]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def redis_url():
    with private_redis() as url:
        yield url


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    r = Receiver(tmp_path_factory.mktemp("webhooks"))
    yield r
    r.stop()


@pytest.fixture(scope="module")
def gateway(redis_url):
    from gateway.settings import GatewaySettings

    worker = WorkerProcess(redis_url, script=write_rules([("", "All done.")])).wait_ready()
    with pytest.MonkeyPatch.context() as mp:  # the gateway reads its webhook settings at start
        mp.setenv("TOOLQ_WEBHOOK_SECRETS", SECRETS)
        mp.setenv("TOOLQ_WEBHOOK_ALLOW_PRIVATE", "true")
        gw = LiveGateway(GatewaySettings(redis_url=redis_url)).start()
    try:
        yield gw
    finally:
        gw.stop()
        worker.stop()


@pytest.fixture
def sender(redis_url):
    s = SenderProcess(redis_url).wait_ready()
    yield s
    s.stop()


def submit(gateway: LiveGateway, webhook: dict) -> str:
    r = httpx.post(gateway.url + "/v1/jobs", json={"messages": [{"role": "user", "content": "hi"}], "webhook": webhook})
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


def wait_for(what, check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def job_log(gateway: LiveGateway, job_id: str) -> list[dict]:
    r = httpx.get(f"{gateway.url}/v1/jobs/{job_id}/webhooks")
    assert r.status_code == 200, r.text
    return r.json()["data"]


def finished(gateway: LiveGateway, job_id: str):
    return lambda: [d for d in job_log(gateway, job_id) if d["status"] in ("delivered", "failed")]


def assert_verified(deliveries: list[dict]) -> None:
    # Both secrets of the rotation verify every delivery (two v1 signatures), checked by the receiver
    # with the standardwebhooks package.
    assert deliveries and all(d["verified"] == [True, True] and d["signatures"] == 2 for d in deliveries), deliveries


def test_retries_carry_the_same_id_until_the_receiver_takes_it(gateway, receiver, sender):
    job_id = submit(gateway, {"url": receiver.url + "/fail/2", "events": ["completed", "failed"]})
    [d] = wait_for("the delivery to end", finished(gateway, job_id))
    assert d["status"] == "delivered" and d["type"] == "completed" and d["attempts"] == 3, d
    assert [a["status_code"] for a in d["history"]] == [500, 500, 200]
    got = receiver.received(d["id"])
    assert [x["n"] for x in got] == [1, 2, 3] and [x["status"] for x in got] == [500, 500, 200]
    assert_verified(got)
    body = got[-1]["body"]
    assert body["type"] == "job.completed" and body["data"]["job_id"] == job_id
    assert body["data"]["event"]["type"] == "final" and body["data"]["event"]["data"]["content"] == "All done."
    # Retries back off: each waits at least half its base (0.2 s, then 0.4 s).
    times = [x["received_at"] for x in got]
    assert times[1] - times[0] >= 0.1 and times[2] - times[1] >= 0.2
    metrics = httpx.get(f"http://127.0.0.1:{sender.metrics_port}/metrics").text
    assert 'toolq_webhook_attempts_total{result="retry"} 2.0' in metrics
    assert 'toolq_webhook_attempts_total{result="delivered"} 1.0' in metrics
    assert 'toolq_webhook_deliveries_total{outcome="delivered"} 1.0' in metrics


def test_a_response_names_its_webhook_in_the_toolq_extension(gateway, receiver, sender):
    """The Responses API with the official openai package: the webhook rides in extra_body."""
    import openai

    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
        response = client.responses.create(
            model="scripted", input="hi", extra_body={"toolq": {"webhook": {"url": receiver.url + "/ok"}}}
        )
    assert response.output_text == "All done."
    [got] = wait_for("the response's delivery", lambda: [x for x in receiver.received() if x["path"] == "/ok"])
    assert got["status"] == 200 and got["body"]["type"] == "job.completed"
    assert got["body"]["data"]["event"]["data"]["content"] == "All done."
    assert_verified([got])


@pytest.fixture
def impatient_sender(redis_url):
    s = SenderProcess(redis_url, TOOLQ_WEBHOOK_GIVE_UP_AFTER_S="1.5").wait_ready()
    yield s
    s.stop()


def test_a_receiver_that_never_takes_it_ends_in_the_dead_letter_list_and_resending_works(
    gateway, receiver, impatient_sender, redis_url
):
    job_id = submit(gateway, {"url": receiver.url + "/down"})
    [d] = wait_for("the delivery to give up", finished(gateway, job_id))
    assert d["status"] == "failed" and d["attempts"] >= 2 and "503" in d["last_error"], d
    assert [a["status_code"] for a in d["history"]] == [503] * d["attempts"]
    failed = httpx.get(gateway.url + "/v1/webhooks/failed").json()["data"]
    assert d["id"] in [f["id"] for f in failed]
    with SyncClient(gateway.url) as sdk:  # the SDK reads the same log and dead-letter list
        assert [x.id for x in sdk.job_deliveries(job_id)] == [d["id"]]
        assert d["id"] in [x.id for x in sdk.failed_deliveries()]
        assert sdk.delivery(d["id"]).status == "failed"
    listed = subprocess.run(
        [sys.executable, "-m", "toolq", "webhooks", "--redis", redis_url, "failed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and d["id"] in [json.loads(x)["id"] for x in listed.stdout.splitlines()]

    httpx.post(receiver.url + "/_heal")
    with SyncClient(gateway.url) as sdk:
        sent = sdk.redeliver(d["id"])
    # Back in the due set: the sender, woken by it, may have claimed or even sent it already.
    assert sent.id == d["id"] and sent.status in ("pending", "sending", "delivered"), sent
    again = httpx.post(f"{gateway.url}/v1/webhooks/deliveries/{d['id']}/redeliver")
    assert again.status_code == 409  # not failed (pending or delivered)

    def delivered():
        one = httpx.get(f"{gateway.url}/v1/webhooks/deliveries/{d['id']}").json()
        return one if one["status"] == "delivered" else None

    one = wait_for("the redelivery", delivered)
    assert one["history"][-1]["status_code"] == 200
    got = receiver.received(d["id"])
    assert got[-1]["status"] == 200 and len({x["id"] for x in got}) == 1
    assert_verified(got)
    assert d["id"] not in [f["id"] for f in httpx.get(gateway.url + "/v1/webhooks/failed").json()["data"]]


def test_a_sender_killed_mid_delivery_loses_nothing(gateway, receiver, redis_url):
    first = SenderProcess(redis_url).wait_ready()
    job_id = submit(gateway, {"url": receiver.url + "/hang-first"})
    msg = wait_for(
        "the first attempt to reach the receiver",
        lambda: (
            receiver.received()
            and [x for x in receiver.received() if x["path"] == "/hang-first" and x["body"]["data"]["job_id"] == job_id]
        ),
    )
    first.kill()  # SIGKILL while the receiver holds the request
    msg_id = msg[0]["id"]
    second = SenderProcess(redis_url).wait_ready()
    try:
        [d] = wait_for("the delivery after the lease ran out", finished(gateway, job_id))
    finally:
        second.stop()
    assert d["status"] == "delivered" and d["id"] == msg_id and d["attempts"] == 2
    got = receiver.received(msg_id)
    assert [x["n"] for x in got] == [1, 2] and got[1]["status"] == 200
    assert_verified(got)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1/", "is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "is a link-local address"),
        ("http://10.1.2.3:8080/hook", "is a private address"),
        ("http://[::1]/", "is a loopback address"),
        ("http://localhost:9/hook", "resolves to"),
    ],
)
async def test_private_addresses_are_refused_at_submission_unless_allowed(redis_url, url, why):
    from gateway.settings import GatewaySettings
    from tests.integration.gateway_support import asgi_client
    from toolq.webhooks.settings import WebhookSettings

    body = {"messages": [{"role": "user", "content": "hi"}], "webhook": url}
    refused = WebhookSettings(secrets={"default": [NEW]})
    async with asgi_client(GatewaySettings(redis_url=redis_url), webhooks=refused) as client:
        r = await client.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "webhook_refused" and error["field"] == "webhook.url"
    assert why in error["message"] and "TOOLQ_WEBHOOK_ALLOW_PRIVATE" in error["message"]

    allowed = WebhookSettings(secrets={"default": [NEW]}, allow_private=True)
    async with asgi_client(GatewaySettings(redis_url=redis_url), webhooks=allowed) as client:
        r = await client.post("/v1/jobs", json=body)
    # Past the webhook check: accepted, or refused by the fleet check when no worker runs.
    assert r.status_code == 202 or r.json()["error"]["code"] != "webhook_refused", r.text


async def test_a_tenant_without_a_secret_cannot_name_a_webhook(redis_url):
    from gateway.settings import GatewaySettings
    from tests.integration.gateway_support import asgi_client
    from toolq.webhooks.settings import WebhookSettings

    async with asgi_client(GatewaySettings(redis_url=redis_url), webhooks=WebhookSettings()) as client:
        r = await client.post(
            "/v1/jobs", json={"messages": [{"role": "user", "content": "hi"}], "webhook": "https://example.com/h"}
        )
    assert r.status_code == 422 and "TOOLQ_WEBHOOK_SECRETS" in r.json()["error"]["message"]


async def test_deliveries_are_recorded_with_the_events_they_report(redis_url):
    """In the same script as the event: a pause and a cancel each record one delivery of the
    events the webhook wants, and nothing else records any."""
    store = JobStore.from_url(redis_url)
    ds = Deliveries(store.redis)
    try:
        hook = Webhook(url="https://example.com/h", events=["requires_action", "cancelled"])
        req = JobRequest(messages=[Message(role="user", content="hi")], webhook=hook)
        job_id, _ = await store.submit(Submission(req, model="m", tenant="t1"))
        await store.emit(job_id, EventType.started, {}, attempt=1, status=JobStatus.running, lease_ms=10_000)
        from tests.support.pauses import pending

        await store.pause(
            job_id,
            attempt=1,
            pending=[pending("call_1", "client")],
            deadline_ms=now_ms() + 60_000,
            checkpoint={"messages": []},
        )
        await store.cancel(job_id)
        log = await ds.of_job(job_id, "t1")
        assert [(d.type, d.event["type"], d.status) for d in log] == [
            ("requires_action", "requires_action", "pending"),
            ("cancelled", "cancelled", "pending"),
        ]
        assert await ds.of_job(job_id, "another tenant") == []
        due = {m.decode() for m in await store.redis.zrange(keys.WEBHOOK_DUE, 0, -1)}
        assert {d.id for d in log} <= due

        # A webhook that wants only "completed": a cancelled job records nothing.
        only = JobRequest(
            messages=[Message(role="user", content="hi")], webhook={"url": "https://e.com/", "events": ["completed"]}
        )
        other, _ = await store.submit(Submission(only, model="m", tenant="t1"))
        await store.cancel(other)
        assert await ds.of_job(other, "t1") == []
    finally:
        await store.close()


async def test_the_sender_checks_the_address_again_at_delivery(redis_url):
    """A delivery recorded without the gateway's check (the SDK's Redis mode) to a loopback
    address: the sender, not allowed private addresses, refuses it at once and says why."""
    from webhooks.sender import Sender
    from webhooks.settings import SenderSettings

    store = JobStore.from_url(redis_url)
    try:
        req = JobRequest(messages=[Message(role="user", content="hi")], webhook="http://127.0.0.1:9/hook")
        job_id, _ = await store.submit(Submission(req, model="m", tenant="t2"))
        await store.cancel(job_id)
        settings = SenderSettings(redis_url=redis_url, secrets={"t2": [NEW]}, allow_private=False)
        sender = Sender(settings, Deliveries(store.redis))
        stop = asyncio.Event()
        run = asyncio.ensure_future(sender.run(stop))
        ds = Deliveries(store.redis)

        async def failed():
            return [d for d in await ds.of_job(job_id, "t2") if d.status == "failed"]

        await eventually(failed)
        stop.set()
        await asyncio.wait_for(run, 10)
        [d] = await ds.of_job(job_id, "t2")
        assert d.attempts == 1 and "loopback" in (d.last_error or "")
        assert [x.id for x in await ds.failed("t2")] == [d.id]
    finally:
        await store.close()


async def test_an_attempt_connects_to_the_address_it_checked(receiver):
    """DNS rebinding: the name is resolved once, checked, and the connection goes to that address
    (with the URL's Host), even if the name would resolve elsewhere a moment later."""
    from toolq.webhooks.deliveries import Delivery
    from webhooks.attempt import attempt

    answers = [["127.0.0.1"], ["10.9.9.9"]]
    asked = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[len(asked) - 1]

    url = f"http://hooks.invalid:{receiver.port}/ok?pinned"
    d = Delivery(
        id="msg_pinned1",
        job_id="job_pinned",
        tenant="default",
        url=url,
        type="completed",
        status="sending",
        created_ms=now_ms(),
        event={"type": "final", "ts": now_ms()},
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        out = await attempt(client, d, [NEW, OLD], allow_private=True, timeout_s=5, resolver=resolve)
        # The name now answers a private address, and private ones are not allowed: refused at once.
        refused = await attempt(client, d, [NEW], allow_private=False, timeout_s=5, resolver=resolve)
    assert out.kind == "delivered" and asked == ["hooks.invalid", "hooks.invalid"]
    [got] = receiver.received("msg_pinned1")
    assert got["host"] == f"hooks.invalid:{receiver.port}" and got["path"] == "/ok?pinned"
    assert_verified([got])
    assert refused.kind == "dead" and "10.9.9.9" in (refused.error or "")


async def test_a_tenant_default_applies_to_jobs_that_name_no_webhook(gateway, receiver, redis_url):
    from gateway.settings import GatewaySettings
    from tests.integration.gateway_support import asgi_client
    from toolq.webhooks.settings import WebhookSettings

    default = Webhook(url=receiver.url + "/ok?default", events=["completed"])
    settings = WebhookSettings(secrets={"default": [NEW]}, defaults={"default": default}, allow_private=True)
    async with asgi_client(GatewaySettings(redis_url=redis_url), webhooks=settings) as client:
        r = await client.post("/v1/jobs", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]

        async def recorded():
            return (await client.get(f"/v1/jobs/{job_id}/webhooks")).json()["data"]

        [d] = await eventually(recorded, timeout=20)
    assert d["url"] == default.url and d["type"] == "completed" and d["event"]["type"] == "final"


async def test_a_batch_announces_its_end_to_the_tenants_default_webhook(gateway, receiver, redis_url, sender):
    """batch.completed and batch.failed (gateway/openai/batches/announce.py), signed like a job's."""
    from gateway.settings import GatewaySettings
    from tests.integration.gateway_support import asgi_client
    from toolq.webhooks.settings import WebhookSettings

    default = Webhook(url=receiver.url + "/ok?batches", events=["completed"])
    settings = WebhookSettings(secrets={"default": [NEW]}, defaults={"default": default}, allow_private=True)
    line = {"custom_id": "x", "method": "POST", "url": "/v1/chat/completions"}
    good = json.dumps({**line, "body": {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}})
    async with asgi_client(GatewaySettings(redis_url=redis_url), webhooks=settings) as client:

        async def batch_of(text: str) -> dict:
            up = await client.post("/v1/files", files={"file": ("in.jsonl", text.encode())}, data={"purpose": "batch"})
            assert up.status_code == 200, up.text
            form = {"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
            r = await client.post("/v1/batches", json=form)
            assert r.status_code == 200, r.text
            return r.json()

        failed = await batch_of("not json\n")
        assert failed["status"] == "failed"
        done = await batch_of(good + "\n")

        async def completed():
            b = (await client.get(f"/v1/batches/{done['id']}")).json()
            return b if b["status"] == "completed" else None

        await eventually(completed, timeout=30)
    got = wait_for(
        "two batch deliveries",
        lambda: (
            [r for r in receiver.received() if r["path"] == "/ok?batches"][1:]
            and [r for r in receiver.received() if r["path"] == "/ok?batches"]
        ),
    )
    by_type = {r["body"]["type"]: r["body"] for r in got}
    assert set(by_type) == {"batch.failed", "batch.completed"}, by_type
    assert by_type["batch.completed"]["data"]["id"] == done["id"]
    assert by_type["batch.completed"]["data"]["batch"]["request_counts"] == {"total": 1, "completed": 1, "failed": 0}
    assert by_type["batch.failed"]["data"]["batch"]["errors"]["data"][0]["line"] == 1
    assert_verified(got)
