"""What threads may keep in Redis (store/threads.py: ThreadLimits): a default TTL, a cap on
each tenant's threads and on each thread's messages, answered with a 422 naming the cap through
/v1/threads and the Conversations API, over a real gateway app and Redis."""

from __future__ import annotations

import redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import asgi_client, register_fake_worker
from toolq.tenants import TenantPolicy

MODEL = "alpha"


def user(text: str) -> dict:
    return {"role": "user", "content": text}


async def test_a_thread_gets_the_default_ttl_refreshed_by_each_write(redis_url):
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, thread_ttl_s=600)
    r = redis.Redis.from_url(redis_url)
    async with asgi_client(s) as c:
        made = (await c.post("/v1/threads", json={"messages": [user("a")]})).json()
        assert made["ttl_s"] == 600
        tid = made["id"]
        assert 590 <= r.ttl(keys.thread(tid)) <= 600 and 590 <= r.ttl(keys.thread_messages(tid)) <= 600
        r.expire(keys.thread(tid), 100)
        assert (await c.post(f"/v1/threads/{tid}/messages", json={"messages": [user("b")]})).status_code == 200
        assert r.ttl(keys.thread(tid)) > 590  # the write set it again
        own = (await c.post("/v1/threads", json={"ttl_s": 60})).json()
        assert own["ttl_s"] == 60 and r.ttl(keys.thread(own["id"])) <= 60  # the caller's own stays
    r.close()


async def test_a_tenant_past_its_thread_cap_gets_422_naming_it(redis_url):
    s = GatewaySettings(
        redis_url=redis_url, fleet_cache_s=0, max_threads=2, tenants={"big": TenantPolicy(max_threads=3)}
    )
    async with asgi_client(s) as c:
        ids = [(await c.post("/v1/threads", json={})).json()["id"] for _ in range(2)]
        refused = await c.post("/v1/threads", json={})
        assert refused.status_code == 422, refused.text
        err = refused.json()["error"]
        assert err["code"] == "limit_exceeded" and err["field"] == "threads"
        assert "tenant 'default' has 2 threads, its limit is 2" in err["message"]
        conv = await c.post("/v1/conversations", json={})
        assert conv.status_code == 422 and "its limit is 2" in conv.json()["error"]["message"]
        redis.Redis.from_url(redis_url).delete(keys.thread(ids[0]))  # expired: no longer counts
        assert (await c.post("/v1/threads", json={})).status_code == 201
        assert (await c.delete(f"/v1/threads/{ids[1]}")).status_code == 200
        assert (await c.post("/v1/threads", json={})).status_code == 201


async def test_a_thread_past_its_message_cap_gets_422_at_every_write(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, max_thread_messages=3)
    async with asgi_client(s) as c:
        too_many = await c.post("/v1/threads", json={"messages": [user(str(i)) for i in range(4)]})
        assert too_many.status_code == 422 and "above a thread's limit of 3 messages" in too_many.text
        tid = (await c.post("/v1/threads", json={"messages": [user("a"), user("b")]})).json()["id"]
        append = await c.post(f"/v1/threads/{tid}/messages", json={"messages": [user("c"), user("d")]})
        assert append.status_code == 422, append.text
        assert (
            f"thread {tid} holds 2 messages and 2 more would pass its limit of 3" in append.json()["error"]["message"]
        )
        run = await c.post(f"/v1/threads/{tid}/runs", json={"messages": [user("c"), user("d")]})
        assert run.status_code == 422 and "its limit of 3" in run.text
        assert (await c.post(f"/v1/threads/{tid}/runs", json={"messages": [user("c")]})).status_code == 202
        conv = (await c.post("/v1/conversations", json={})).json()["id"]
        items = {"items": [{"type": "message", "role": "user", "content": str(i)} for i in range(4)]}
        refused = await c.post(f"/v1/conversations/{conv}/items", json=items)
        assert refused.status_code == 422 and "its limit of 3" in refused.json()["error"]["message"]


async def test_a_run_counts_the_threads_history_against_the_job_message_cap(redis_url):
    """A run's job holds the thread's history with its input, so TOOLQ_MAX_MESSAGES counts both
    (a submitted job's messages are its whole conversation too), through /v1/threads and the
    Conversations API, whose instructions count as well."""
    register_fake_worker(redis_url, MODEL, [])
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, max_messages=4, max_thread_messages=100)
    async with asgi_client(s) as c:
        tid = (await c.post("/v1/threads", json={"messages": [user(str(i)) for i in range(3)]})).json()["id"]
        run = await c.post(f"/v1/threads/{tid}/runs", json={"messages": [user("d"), user("e")]})
        assert run.status_code == 422, run.text
        err = run.json()["error"]
        assert err["code"] == "limit_exceeded" and err["field"] == "messages"
        assert (
            f"a run on thread {tid} would hold 5 messages (the thread's 3, the input's 2), above the limit "
            "of 4 messages per job (TOOLQ_MAX_MESSAGES)" in err["message"]
        )
        assert len((await c.get(f"/v1/threads/{tid}/messages")).json()["data"]) == 3  # nothing was written
        assert (await c.post(f"/v1/threads/{tid}/runs", json={"messages": [user("d")]})).status_code == 202
        conv = (await c.post("/v1/conversations", json={})).json()["id"]
        items = {"items": [{"type": "message", "role": "user", "content": str(i)} for i in range(3)]}
        assert (await c.post(f"/v1/conversations/{conv}/items", json=items)).status_code == 200
        # in the background: the fake worker runs nothing, and a response in the foreground waits for its end
        body = {"model": MODEL, "conversation": conv, "instructions": "be brief", "input": "hi", "background": True}
        refused = await c.post("/v1/responses", json=body)
        assert refused.status_code == 422, refused.text
        assert "(the thread's 3, the input's 1, 1 of instructions), above the limit of 4" in refused.text
        body.pop("instructions")
        assert (await c.post("/v1/responses", json=body)).status_code == 200
