"""Each tenant's share of Redis counted in bytes (store/byte_quota.py): a tenant past its quota
gets a 429 that names the quota and what it keeps, at every door that writes what it sends (a
job, a thread, a message, a run, a file), while another tenant's submissions, threads and worker
go on, on a real redis-server whose maxmemory the quota-less tenant would have filled."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import LiveGateway, asgi_client, register_fake_worker
from tests.support.pauses import paused_job, pending
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules
from toolq.tenants import TenantPolicy

KEYS = {"a-key": "hog", "b-key": "calm"}
MB = 1 << 20
CHUNK = "x" * (256 << 10)  # a quarter of a MiB a message


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def held(r: redis.Redis, tenant: str) -> int:
    return int(r.hget(keys.tenant_bytes(tenant), "#total") or 0)


async def test_every_door_charges_the_tenant_and_refuses_past_its_quota(redis_url):
    register_fake_worker(redis_url, "alpha", [])
    r = redis.Redis.from_url(redis_url)
    s = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys=KEYS,
        tenant_store_bytes=64 * MB,
        tenants={"hog": TenantPolicy(store_bytes=2 * MB)},
    )
    async with asgi_client(s, Authorization="Bearer a-key") as a:
        job = await a.post("/v1/jobs", json={"messages": [user(CHUNK)]})
        assert job.status_code == 202, job.text
        after_job = held(r, "hog")
        assert len(CHUNK) < after_job < 3 * len(CHUNK)  # the request, and the arq payload beside it
        # a Responses request keeps its job and the response (which echoes its instructions)
        resp = await a.post(
            "/v1/responses",
            json={"model": "alpha", "input": "hi", "instructions": "y" * 100_000, "background": True},
        )
        assert resp.status_code == 200, resp.text
        assert held(r, "hog") > after_job + 2 * 100_000
        after_job = held(r, "hog")
        made = await a.post("/v1/threads", json={"messages": [user(CHUNK)]})
        assert made.status_code == 201
        tid = made.json()["id"]
        added = await a.post(f"/v1/threads/{tid}/messages", json={"messages": [user(CHUNK)]})
        assert added.status_code == 200
        assert held(r, "hog") >= after_job + 2 * len(CHUNK)
        # a run's record keeps its input twice and starts with a copy of the thread's history
        before = held(r, "hog")
        run = await a.post(f"/v1/threads/{tid}/runs", json={"messages": [user("go")]})
        assert run.status_code == 202, run.text
        assert held(r, "hog") >= before + 2 * len(CHUNK)

        # filled to within a message of 2 MiB: every door that would keep more refuses, writing nothing
        for _ in range(8):
            if (await a.post(f"/v1/threads/{tid}/messages", json={"messages": [user(CHUNK)]})).status_code == 429:
                break
        assert 2 * MB - 2 * len(CHUNK) < held(r, "hog") <= 2 * MB
        depth = r.zcard(keys.tenant_jobs("hog"))
        for door, body in [
            ("/v1/jobs", {"messages": [user(CHUNK)]}),
            ("/v1/threads", {"messages": [user(CHUNK)]}),
            (f"/v1/threads/{tid}/messages", {"messages": [user(CHUNK)]}),
            (f"/v1/threads/{tid}/runs", {"messages": [user(CHUNK)]}),
        ]:
            refused = await a.post(door, json=body)
            assert refused.status_code == 429, (door, refused.text)
            err = refused.json()["error"]
            assert err["code"] == "store_quota_exceeded" and err["field"] == "store_bytes", err
            assert "tenant 'hog' keeps" in err["message"] and "its quota is 2,097,152 bytes" in err["message"]
            assert "thread messages" in err["message"]
        assert r.zcard(keys.tenant_jobs("hog")) == depth  # no job was recorded
        # a paused job's answers are what the tenant sends too
        paused = await paused_job(a.app.state.toolq.store, pending("c1", "client"), tenant="hog", model="alpha")
        answer = await a.post(f"/v1/jobs/{paused}/tool_results", json=[{"tool_call_id": "c1", "content": CHUNK}])
        assert answer.status_code == 429 and answer.json()["error"]["code"] == "store_quota_exceeded", answer.text
        assert (await a.get(f"/v1/jobs/{paused}")).json()["status"] == "requires_action"  # nothing recorded
        small = await a.post(f"/v1/jobs/{paused}/tool_results", json=[{"tool_call_id": "c1", "content": "ok"}])
        assert small.status_code == 200, small.text
        usage = (await a.get("/v1/usage")).json()  # the tenant sees its quota and what it keeps
        assert usage["store_bytes"] == 2 * MB and usage["store_bytes_used"]["total"] == held(r, "hog")
        assert usage["store_bytes_used"]["thread"] > 0 and usage["store_bytes_used"]["job"] > 0
        upload = await a.post("/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", b"{}\n" * 200_000)})
        assert upload.status_code == 429 and upload.json()["error"]["code"] == "store_quota_exceeded", upload.text
        chat = await a.post("/v1/chat/completions", json={"model": "alpha", "messages": [user(CHUNK)]})
        assert chat.status_code == 429 and "its quota is" in chat.json()["error"]["message"], chat.text

        # deleting the thread gives its bytes back at once
        full = held(r, "hog")
        assert (await a.delete(f"/v1/threads/{tid}")).status_code == 200
        assert held(r, "hog") <= full - 2 * len(CHUNK)
        # a record that ended (its TTL ran out, here deleted) leaves the count at the next charge
        # that finds it due
        r.delete(keys.job(job.json()["job_id"]))
        r.zadd(keys.tenant_bytes("hog") + ":due", {f"job {keys.job(job.json()['job_id'])}": 0}, xx=True)
        assert (await a.post("/v1/jobs", json={"messages": [user("small")]})).status_code == 202
        assert held(r, "hog") < full - 3 * len(CHUNK)
    async with asgi_client(s, Authorization="Bearer b-key") as b:  # the other tenant was never near its own
        assert (await b.post("/v1/jobs", json={"messages": [user(CHUNK)]})).status_code == 202
    r.close()


async def test_a_deleted_file_and_a_forgotten_message_give_their_bytes_back(redis_url):
    r = redis.Redis.from_url(redis_url)
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys=KEYS)
    async with asgi_client(s, Authorization="Bearer b-key") as b:
        body = b'{"custom_id": "1", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n' * 1000
        up = await b.post("/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", body)})
        assert up.status_code == 200, up.text
        assert int(r.hget(keys.tenant_bytes("calm"), "#file")) == len(body)
        assert (await b.delete(f"/v1/files/{up.json()['id']}")).status_code == 200
        tid = (await b.post("/v1/threads", json={"messages": [user("keep"), user(CHUNK)]})).json()["id"]
        before = int(r.hget(keys.tenant_bytes("calm"), "#thread"))
        items = (await b.get(f"/v1/conversations/{tid}/items", params={"order": "asc"})).json()["data"]
        gone = await b.delete(f"/v1/conversations/{tid}/items/{items[1]['id']}")
        assert gone.status_code == 200, gone.text
        assert int(r.hget(keys.tenant_bytes("calm"), "#thread")) <= before - len(CHUNK)
        # the file's bytes leave at the next charge
        await b.post(f"/v1/threads/{tid}/messages", json={"messages": [user("again")]})
        assert int(r.hget(keys.tenant_bytes("calm"), "#file")) == 0
    r.close()


RULES = [(r"(?s)\A.*", "done")]


@pytest.fixture
def small_redis() -> Iterator[tuple[str, redis.Redis]]:
    server = RedisServer(extra=("--maxmemory-policy", "noeviction"))
    server.start()
    url = server.url + "/0"
    r = redis.Redis.from_url(url)
    try:
        yield url, r
    finally:
        r.close()
        server.stop()
        server.remove()


def test_one_tenant_at_its_quota_leaves_the_others_working_in_a_small_redis(small_redis):
    url, r = small_redis
    worker = WorkerProcess(url, script=write_rules(RULES)).wait_ready()
    # 12 MiB of room in all; the hog alone would fill it, its quota stops it at 4
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 12 * MB)
    settings = GatewaySettings(redis_url=url, api_keys=KEYS, fleet_cache_s=0, tenant_store_bytes=4 * MB)
    gw = LiveGateway(settings).start()
    try:
        with (
            httpx.Client(base_url=gw.url, headers={"Authorization": "Bearer a-key"}, timeout=30) as a,
            httpx.Client(base_url=gw.url, headers={"Authorization": "Bearer b-key"}, timeout=30) as b,
        ):
            tid = a.post("/v1/threads", json={}).json()["id"]
            answers = [a.post(f"/v1/threads/{tid}/messages", json={"messages": [user(CHUNK)]}) for _ in range(40)]
            codes = [x.status_code for x in answers]
            assert 200 in codes and codes[-1] == 429, codes  # it was served, then held at its quota
            assert 503 not in codes  # Redis itself never filled
            first = codes.index(429)
            assert all(c == 429 for c in codes[first:])
            assert 4 * MB - 2 * len(CHUNK) <= held(r, "hog") <= 4 * MB
            assert "its quota is 4,194,304 bytes" in answers[-1].json()["error"]["message"]

            # the other tenant's submissions, threads and runs all go on, and the worker runs them
            job = b.post("/v1/jobs", json={"messages": [user(CHUNK)]})
            assert job.status_code == 202, job.text
            bt = b.post("/v1/threads", json={"messages": [user(CHUNK)]})
            assert bt.status_code == 201, bt.text
            run = b.post(f"/v1/threads/{bt.json()['id']}/runs", json={"messages": [user("go")]})
            assert run.status_code == 202, run.text
            for job_id in (job.json()["job_id"], run.json()["job_id"]):
                deadline = time.monotonic() + 30
                while (status := b.get(f"/v1/jobs/{job_id}").json()["status"]) not in ("succeeded", "failed"):
                    assert time.monotonic() < deadline, status
                    time.sleep(0.05)
                assert status == "succeeded"
            page = b.get(f"/v1/threads/{bt.json()['id']}/messages", params={"order": "desc", "limit": 1}).json()
            assert page["data"][0]["message"]["content"] == "done"  # its run's answer joined the thread
            # which counts in its tenant's bytes at the thread's next charge
            tkey = keys.thread(bt.json()["id"])
            assert int(r.hget(tkey, "unbilled")) > 0
            before = int(r.hget(keys.tenant_bytes("calm"), "#thread"))
            assert b.post(f"/v1/threads/{bt.json()['id']}/messages", json={"messages": [user("hi")]}).status_code == 200
            assert int(r.hget(tkey, "unbilled")) == 0
            assert int(r.hget(keys.tenant_bytes("calm"), "#thread")) > before + len("done")
            # and the hog, still refused, recovers what it deletes
            assert a.post("/v1/jobs", json={"messages": [user(CHUNK)]}).status_code == 429
            assert a.delete(f"/v1/threads/{tid}").status_code == 200
            assert a.post("/v1/jobs", json={"messages": [user(CHUNK)]}).status_code == 202
    finally:
        gw.stop()
        worker.stop()
