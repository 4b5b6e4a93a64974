"""A full Redis (``maxmemory`` with ``noeviction``, as docker-compose.yml runs it): the gateway
answers 503 ``store_full`` with Retry-After, never a 500, and every job it acknowledged before is
whole in Redis (gateway/errors.py). A redis-server of its own, with a tiny maxmemory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import asgi_client, register_fake_worker
from tests.support.redis_server import RedisServer

MODEL = "alpha"
BIG = "x" * 16_000  # each job holds this twice or so (its record and its arq payload)


@pytest.fixture
def full_redis() -> Iterator[str]:
    server = RedisServer(extra=("--maxmemory-policy", "noeviction"))
    server.start()
    try:
        url = server.url + "/0"
        register_fake_worker(url, MODEL, [])  # no worker runs: every accepted job stays queued
        yield url
    finally:
        server.stop()
        server.remove()


async def test_a_full_redis_answers_503_and_loses_nothing_it_acknowledged(full_redis):
    r = redis.Redis.from_url(full_redis)
    settings = GatewaySettings(redis_url=full_redis, fleet_cache_s=0)
    job = {"messages": [{"role": "user", "content": BIG}]}
    accepted: list[str] = []
    async with asgi_client(settings) as c:
        assert (await c.post("/v1/jobs", json=job)).status_code == 202  # scripts loaded, store warm
        r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 400_000)
        refused = None
        for _ in range(200):
            resp = await c.post("/v1/jobs", json=job)
            assert resp.status_code in (202, 503), resp.text
            if resp.status_code == 503:
                refused = resp
                break
            accepted.append(resp.json()["job_id"])
        assert refused is not None, "Redis never filled up"
        assert len(accepted) >= 5  # it took jobs until it was full
        err = refused.json()["error"]
        assert err["code"] == "store_full" and "maxmemory" in err["message"], err
        assert int(refused.headers["retry-after"]) >= 1
        # held full (memory near the bound moves a little as Redis frees buffers), every door
        # answers the same: a job, a thread, an OpenAI request
        r.config_set("maxmemory", int(r.info("memory")["used_memory"]) // 2)
        assert (await c.post("/v1/jobs", json=job)).status_code == 503
        assert (await c.post("/v1/threads", json={"messages": job["messages"]})).status_code == 503
        chat = await c.post("/v1/chat/completions", json={"model": MODEL, **job})
        assert chat.status_code == 503 and "maxmemory" in chat.json()["error"]["message"]
        # reads still answer while full
        assert (await c.get(f"/v1/jobs/{accepted[0]}")).status_code == 200

        for job_id in accepted:  # nothing acknowledged was lost, nothing half-written
            assert r.hget(keys.job(job_id), "status") == b"queued"
            assert r.xlen(keys.log(job_id)) == 1
        r.config_set("maxmemory", 0)
        assert (await c.post("/v1/jobs", json=job)).status_code == 202  # room again: accepted again
    r.close()
