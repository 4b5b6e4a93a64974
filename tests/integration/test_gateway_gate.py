"""Nothing leaks, nothing is guessed (issue 34, part 7), through the real gateway app on a real
Redis: /metrics names tenants only for an operator key (gateway/health.py), wrong keys are rate
limited per client address across replicas (gateway/wrong_keys.py), and an open gateway serves
only its own host names, JSON POSTs and its own origin (gateway/browser_guard.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import redis

from gateway.app import create_app
from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import LiveGateway, asgi_client, register_fake_worker

JOB = {"messages": [{"role": "user", "content": "hi"}]}
MODEL = "alpha"


@contextlib.asynccontextmanager
async def from_address(app, address: str, host: str = "gateway") -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``app`` whose requests come from ``address`` (the rate limit's key)."""
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as c:
        yield c


# ---------------------------------------------------------------------- /metrics


async def test_metrics_name_tenants_and_usage_only_for_an_operator_key(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    settings = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys={"key-a": "acme", "key-b": "bolt"},
        operator_keys=["ops-key"],
        max_queue_depth=2,
    )
    async with asgi_client(settings) as c:
        for key in ("key-a", "key-b"):
            assert (await c.post("/v1/jobs", json=JOB, headers={"X-API-Key": key})).status_code == 202
        refused = await c.post("/v1/jobs", json=JOB, headers={"X-API-Key": "key-a"})
        assert refused.status_code == 429, refused.text

        for headers in ({}, {"X-API-Key": "key-a"}, {"Authorization": "Bearer key-b"}):
            r = await c.get("/metrics", headers=headers)
            assert r.status_code == 200, (headers, r.text)
            text = r.text
            assert "tenant=" not in text and "acme" not in text and "bolt" not in text, headers
            assert "toolq_tenant_" not in text
            # the fleet-wide figures are all there, the 429s too, without a tenant
            assert f'toolq_queue_depth{{model="{MODEL}"}} 2.0' in text
            reason = refused.json()["error"].get("code")
            assert f'toolq_jobs_refused_total{{reason="{reason}"}} 1.0' in text, text

        full = (await c.get("/metrics", headers={"Authorization": "Bearer ops-key"})).text
        assert f'toolq_tenant_jobs_waiting{{model="{MODEL}",tenant="acme"}} 1.0' in full
        assert f'toolq_tenant_jobs_waiting{{model="{MODEL}",tenant="bolt"}} 1.0' in full
        assert 'tenant="acme"' in full and "toolq_tenant_refusals_total" in full
        assert "toolq_jobs_refused_total" in full  # the fleet-wide series as well

        wrong = await c.get("/metrics", headers={"X-API-Key": "not-a-key"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"


async def test_open_access_metrics_show_tenants_as_the_open_dashboard_does(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        assert (await c.post("/v1/jobs", json=JOB)).status_code == 202
        text = (await c.get("/metrics")).text
        assert f'toolq_tenant_jobs_waiting{{model="{MODEL}",tenant="default"}} 1.0' in text


# ---------------------------------------------------------------------- wrong keys


async def test_wrong_keys_past_the_limit_lock_the_address_for_the_window_on_every_replica(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    settings = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys={"right-key": "acme"},
        operator_keys=["ops-key"],
        wrong_key_limit=3,
        wrong_key_window_s=3,
    )
    r = redis.Redis.from_url(redis_url)
    async with asgi_client(settings) as one, asgi_client(settings) as two:
        async with (
            from_address(one.app, "203.0.113.7") as attacker,  # type: ignore[attr-defined]
            from_address(two.app, "203.0.113.7") as attacker_two,  # type: ignore[attr-defined]
            from_address(one.app, "198.51.100.9") as owner,  # type: ignore[attr-defined]
        ):
            # the same door counts whichever way a key comes: API, /metrics, dashboard header
            for path, headers in (
                ("/v1/models", {"Authorization": "Bearer guess-1"}),
                ("/metrics", {"X-API-Key": "guess-2"}),
                ("/ui/api/me", {"X-API-Key": "guess-3"}),
            ):
                answer = await attacker.get(path, headers=headers)
                assert answer.status_code == 401, (path, answer.text)
            assert int(r.get(keys.wrong_keys("203.0.113.7"))) == 3
            assert 0 < r.pttl(keys.wrong_keys("203.0.113.7")) <= 3000  # expires with its window

            past = await attacker.post("/v1/jobs", json=JOB, headers={"X-API-Key": "guess-4"})
            assert past.status_code == 429, past.text
            err = past.json()["error"]
            assert err["code"] == "too_many_wrong_keys" and "wrong_key_limit" in err["message"]
            assert 1 <= int(past.headers["retry-after"]) <= 3
            # locked: a right key from there is refused as well (else a 429 would just mean "wrong")
            right = await attacker.get("/v1/models", headers={"X-API-Key": "right-key"})
            assert right.status_code == 429
            login = await attacker.post("/ui/login", json={"key": "ops-key"})
            assert login.status_code == 429
            # the other replica counts in the same Redis: its first wrong key from there is a 429
            assert (await attacker_two.get("/v1/models", headers={"X-API-Key": "guess-5"})).status_code == 429
            # the owner, elsewhere, is not locked out
            assert (await owner.get("/v1/models", headers={"X-API-Key": "right-key"})).status_code == 200
            assert (await owner.post("/v1/jobs", json=JOB, headers={"X-API-Key": "right-key"})).status_code == 202
            # no key at all is the usual 401, not a guess
            assert (await attacker.get("/v1/models")).status_code == 401

            await asyncio.sleep(3.1)  # the window ends: the address starts afresh
            assert (await attacker.get("/v1/models", headers={"X-API-Key": "right-key"})).status_code == 200
            assert (await attacker.get("/v1/models", headers={"X-API-Key": "guess-6"})).status_code == 401


async def test_another_tenants_guesses_from_a_shared_address_do_not_lock_out_a_proven_key(redis_url):
    """Tenants behind one address (a NAT, a proxy, one host): tenant B's key, right from there
    before the lock, keeps working while tenant A's guesses have the address locked; a right key
    first presented during the lock is refused like any guess, so guessing learns nothing."""
    register_fake_worker(redis_url, MODEL, [])
    settings = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys={"key-b": "b", "key-c": "c"},
        wrong_key_limit=2,
        wrong_key_window_s=30,
    )
    async with asgi_client(settings) as one, asgi_client(settings) as two:
        async with (
            from_address(one.app, "203.0.113.50") as shared,  # type: ignore[attr-defined]
            from_address(two.app, "203.0.113.50") as shared_two,  # type: ignore[attr-defined]
        ):
            assert (await shared.get("/v1/models", headers={"X-API-Key": "key-b"})).status_code == 200
            for i in range(3):  # tenant A guesses past the limit
                await shared.get("/v1/models", headers={"X-API-Key": f"guess-{i}"})
            assert (await shared.get("/v1/models", headers={"X-API-Key": "guess-9"})).status_code == 429
            # B goes on, on either replica (the proof is in Redis)
            assert (await shared.get("/v1/models", headers={"X-API-Key": "key-b"})).status_code == 200
            assert (await shared.post("/v1/jobs", json=JOB, headers={"X-API-Key": "key-b"})).status_code == 202
            assert (await shared_two.get("/v1/models", headers={"X-API-Key": "key-b"})).status_code == 200
            # a right key never used from here before the lock is refused like a guess
            assert (await shared.get("/v1/models", headers={"X-API-Key": "key-c"})).status_code == 429


async def test_wrong_keys_at_the_dashboard_sign_in_are_limited_and_a_session_keeps_working(redis_url):
    settings = GatewaySettings(
        redis_url=redis_url,
        fleet_cache_s=0,
        api_keys={"right-key": "acme", "other-key": "beta"},
        wrong_key_limit=2,
        wrong_key_window_s=60,
        ui_secret="s" * 32,
    )
    async with (
        asgi_client(settings) as c,
        from_address(c.app, "192.0.2.44") as browser,  # type: ignore[attr-defined]
        from_address(c.app, "192.0.2.44") as guesser,  # type: ignore[attr-defined]
    ):
        assert (await browser.post("/ui/login", json={"key": "right-key"})).status_code == 200
        for guess in ("g1", "g2"):
            assert (await guesser.post("/ui/login", json={"key": guess})).status_code == 401
        locked = await guesser.post("/ui/login", json={"key": "g3"})
        assert locked.status_code == 429 and locked.json()["error"]["code"] == "too_many_wrong_keys"
        assert 50 <= int(locked.headers["retry-after"]) <= 60
        # a right key never used from here is refused like a guess; the one proven here goes on
        assert (await guesser.post("/ui/login", json={"key": "other-key"})).status_code == 429
        assert (await guesser.post("/ui/login", json={"key": "right-key"})).status_code == 200
        # a session signed in before is not a key guess: it goes on, from the same address
        me = await browser.get("/ui/api/me")
        assert me.status_code == 200 and me.json()["tenant"] == "acme"


# ---------------------------------------------------------------------- open mode: hosts, bodies, origins


async def test_an_open_gateway_serves_only_its_own_host_names(redis_url):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, allowed_hosts=["toolq.lan"])
    async with asgi_client(settings) as c:
        for host in ("localhost", "localhost:8000", "LOCALHOST.", "127.0.0.1:8000", "[::1]:8000", "toolq.lan:80"):
            assert (await c.get("/v1/models", headers={"Host": host})).status_code == 200, host
        for host in ("rebound.example", "rebound.example:8000", "127.0.0.1.nip.io", "localhost.evil.example"):
            # probes show nothing and answer any name (a pod probed by its address)
            assert (await c.get("/healthz", headers={"Host": host})).status_code == 200
            assert (await c.get("/metrics", headers={"Host": host})).status_code == 421
            r = await c.get("/v1/models", headers={"Host": host})
            assert r.status_code == 421, host
            err = r.json()["error"]
            assert err["code"] == "misdirected_request" and err["field"] == "Host"
            assert repr(host.partition(":")[0]) in err["message"] and "TOOLQ_ALLOWED_HOSTS" in err["message"]


def test_a_rebound_name_gets_421_from_the_real_server(redis_url):
    """On a real socket: what a page whose name was rebound to 127.0.0.1 would get."""
    gw = LiveGateway(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)).start()
    try:
        assert httpx.get(f"{gw.url}/healthz").status_code == 200  # Host: 127.0.0.1:<port>
        assert httpx.get(f"http://localhost:{gw.port}/healthz").status_code == 200
        r = httpx.get(f"{gw.url}/v1/models", headers={"Host": f"attacker.example:{gw.port}"})
        assert r.status_code == 421 and "'attacker.example'" in r.json()["error"]["message"]
    finally:
        gw.stop()


async def test_an_open_gateway_takes_only_json_posts_from_its_own_origin(redis_url):
    register_fake_worker(redis_url, MODEL, [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as c:
        # what a cross-site form can send: refused before anything reads it
        for content_type, data in (
            ("text/plain", b'{"messages": [{"role": "user", "content": "hi"}]}'),
            ("application/x-www-form-urlencoded", b"messages=hi"),
            ("multipart/form-data; boundary=x", b"--x\r\n\r\nhi\r\n--x--\r\n"),
        ):
            r = await c.post("/v1/jobs", content=data, headers={"Content-Type": content_type})
            assert r.status_code == 415, (content_type, r.text)
            err = r.json()["error"]
            assert err["code"] == "unsupported_media_type" and err["field"] == "Content-Type"
            assert content_type in err["message"]
        assert (await c.post("/v1/jobs", content=b'{"messages": []}')).status_code == 415  # a body, no type

        for origin in ("http://evil.example", "null", "http://gateway.evil.example", "http://gateway:8000"):
            r = await c.post("/v1/jobs", json=JOB, headers={"Origin": origin})
            assert r.status_code == 403, origin
            assert r.json()["error"]["field"] == "Origin" and origin in r.json()["error"]["message"]
        assert (await c.delete("/v1/threads/thread_x", headers={"Origin": "http://evil.example"})).status_code == 403

        # its own pages, and clients that send no Origin, are served
        ok = await c.post("/v1/jobs", json=JOB, headers={"Origin": "http://gateway"})
        assert ok.status_code == 202, ok.text
        job_id = (await c.post("/v1/jobs", json=JOB, headers={"Content-Type": "application/json"})).json()["job_id"]
        assert (await c.post(f"/v1/jobs/{job_id}/cancel")).status_code == 200  # no body: no type needed
        assert (await c.get("/v1/models", headers={"Origin": "http://evil.example"})).status_code == 200  # reads


async def test_with_api_keys_the_host_and_body_rules_are_the_callers_own(redis_url):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"k": "acme"})
    app = create_app(settings)
    async with app.router.lifespan_context(app), from_address(app, "127.0.0.1", host="toolq.example.com") as c:
        assert (await c.get("/v1/models", headers={"X-API-Key": "k"})).status_code == 200
        r = await c.post("/v1/jobs", content=b"x", headers={"X-API-Key": "k", "Content-Type": "text/plain"})
        assert r.status_code == 422  # not JSON, answered as before: a keyed caller is no browser page
    named = settings.model_copy(update={"allowed_hosts": ["toolq.example.com"]})
    app = create_app(named)
    async with app.router.lifespan_context(app), from_address(app, "127.0.0.1", host="other.example") as c:
        assert (await c.get("/v1/models", headers={"X-API-Key": "k"})).status_code == 421


@pytest.mark.parametrize("value", ["toolq.lan,gw.internal", '["toolq.lan", "gw.internal"]'])
def test_allowed_hosts_and_the_wrong_key_limit_from_the_environment(monkeypatch, value):
    monkeypatch.setenv("TOOLQ_ALLOWED_HOSTS", value)
    monkeypatch.setenv("TOOLQ_WRONG_KEY_LIMIT", "5")
    monkeypatch.setenv("TOOLQ_WRONG_KEY_WINDOW_S", "60")
    s = GatewaySettings()
    assert s.allowed_hosts == ["toolq.lan", "gw.internal"]
    assert (s.wrong_key_limit, s.wrong_key_window_s) == (5, 60)
    defaults = GatewaySettings.model_fields
    assert (defaults["wrong_key_limit"].default, defaults["wrong_key_window_s"].default) == (20, 300)
