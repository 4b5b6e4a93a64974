"""The dashboard's JSON endpoints (/ui/api, gateway/ui/api.py) and sign-in (gateway/ui/session.py)
against a real Redis: sessions, tenants and operators, bad input and other tenants' ids (4xx,
never 5xx, nothing leaked), and the recent-jobs index they list from (store/job_index.py).
Jobs are submitted through /v1/jobs to a registry entry with no worker behind it, so they stay
queued; paused jobs are made in Redis as a worker leaves them (tests/support/pauses.py)."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from gateway.ui.session import COOKIE
from store import job_index, keys, quarantine
from store.jobstore import JobStore
from store.leases import Leases
from store.submission import Submission
from tests.integration.gateway_support import asgi_client, register_fake_worker
from tests.support.pauses import paused_job, pending
from toolq.wire.protocol import JobRequest

A, B, OP = "key-a", "key-b", "key-operator"
JOB = {"messages": [{"role": "user", "content": "hi"}]}
REQUEST = JobRequest.model_validate(JOB)


@pytest.fixture
async def store(redis_url):
    s = JobStore.from_url(redis_url, fair=True)
    yield s
    await s.close()


@pytest.fixture
def settings(redis_url) -> GatewaySettings:
    register_fake_worker(redis_url, "m", ["calculate_zorbix"])
    return GatewaySettings(
        redis_url=redis_url, fleet_cache_s=0, api_keys={A: "ta", B: "tb"}, operator_keys=[OP], ui_secret="s" * 32
    )


@pytest.fixture
async def http(settings):
    async with asgi_client(settings) as c:
        yield c


async def submit(http, key: str, **extra) -> str:
    r = await http.post("/v1/jobs", json={**JOB, **extra}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


async def sign_in(http, key: str):
    http.cookies.clear()
    r = await http.post("/ui/login", json={"key": key})
    assert r.status_code == 200, r.text
    return r


# ---------------------------------------------------------------------- signing in


async def test_sign_in_sets_a_strict_http_only_cookie_and_the_session_names_the_viewer(http):
    r = await sign_in(http, A)
    assert r.json() == {"tenant": "ta", "operator": False, "open": False}
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and A not in cookie
    for attr in ("HttpOnly", "SameSite=strict", "Path=/ui", "Max-Age=28800"):
        assert attr.lower() in cookie.lower(), cookie
    assert (await http.get("/ui/api/me")).json() == {"tenant": "ta", "operator": False, "open": False}

    await sign_in(http, OP)
    assert (await http.get("/ui/api/me")).json() == {"tenant": None, "operator": True, "open": False}

    r = await http.post("/ui/logout")
    assert r.status_code == 204 and "max-age=0" in r.headers["set-cookie"].lower()
    http.cookies.clear()
    assert (await http.get("/ui/api/me")).status_code == 401


async def test_a_wrong_key_a_forged_or_tampered_cookie_and_no_session_are_401(http):
    for body in ({"key": "nope"}, {"key": ""}, {}, {"key": "x" * 10_000}, [], "key"):
        r = await http.post("/ui/login", json=body)
        assert r.status_code in (401, 422), (body, r.status_code, r.text)
    r = await sign_in(http, A)
    token = http.cookies[COOKIE]
    body, _, sig = token.partition(".")
    for forged in (body + "." + sig[:-2] + "AA", body[:-2] + "." + sig, "garbage", "a.b.c", "." * 600, ""):
        http.cookies.clear()
        http.cookies.set(COOKIE, forged, domain="gateway", path="/ui")
        assert (await http.get("/ui/api/me")).status_code == 401, forged
    http.cookies.clear()
    r = await http.get("/ui/api/jobs")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    # an API key header works without a session (scripts), a wrong one does not
    assert (await http.get("/ui/api/me", headers={"X-API-Key": B})).json()["tenant"] == "tb"
    assert (await http.get("/ui/api/me", headers={"Authorization": "Bearer nope"})).status_code == 401


async def test_a_key_removed_from_the_configuration_ends_its_sessions(redis_url, settings):
    async with asgi_client(settings) as http:
        await sign_in(http, A)
        token = http.cookies[COOKIE]
    fewer = settings.model_copy(update={"api_keys": {B: "tb"}})
    async with asgi_client(fewer) as http:
        http.cookies.set(COOKIE, token, domain="gateway", path="/ui")
        assert (await http.get("/ui/api/me")).status_code == 401  # same secret, key gone


async def test_pages_without_a_session_go_to_sign_in_and_carry_a_strict_policy(http):
    for path in ("/ui", "/ui/", "/ui/jobs", "/ui/jobs/anything", "/ui/approvals"):
        r = await http.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login", path
    r = await http.get("/ui/login")
    assert r.status_code == 200 and "default-src 'self'" in r.headers["content-security-policy"]
    await sign_in(http, A)
    r = await http.get('/ui/jobs/x"><img src=x onerror=alert(1)>')
    assert r.status_code == 200 and "<img src=x" not in r.text and "&lt;img src=x" in r.text
    for asset in ("/ui/static/app.js", "/ui/static/ui.css", "/ui/static/vendor/alpinejs/alpine.min.js"):
        assert (await http.get(asset)).status_code == 200, asset


async def test_open_mode_needs_no_sign_in_and_shows_every_tenant(redis_url):
    register_fake_worker(redis_url, "m", [])
    async with asgi_client(GatewaySettings(redis_url=redis_url, fleet_cache_s=0)) as http:
        assert (await http.get("/ui/api/me")).json() == {"tenant": None, "operator": True, "open": True}
        assert (await http.get("/ui")).status_code == 200


# ---------------------------------------------------------------------- tenants and operators


async def test_a_tenant_lists_and_opens_only_its_own_jobs_and_an_operator_sees_all(http):
    a1, a2, b1 = await submit(http, A), await submit(http, A), await submit(http, B)
    await sign_in(http, A)
    assert [j["job_id"] for j in (await http.get("/ui/api/jobs")).json()["jobs"]] == [a2, a1]
    assert (await http.get(f"/ui/api/jobs/{a1}")).status_code == 200
    missing = (await http.get("/ui/api/jobs/no-such-job")).json()
    for method, path, body in (
        ("GET", f"/ui/api/jobs/{b1}", None),
        ("GET", f"/ui/api/jobs/{b1}/events", None),
        ("POST", f"/ui/api/jobs/{b1}/cancel", None),
        ("POST", f"/ui/api/jobs/{b1}/approvals", [{"tool_call_id": "c", "approved": True}]),
        ("POST", f"/ui/api/jobs/{b1}/tool_results", [{"tool_call_id": "c", "content": "x"}]),
    ):
        r = await http.request(method, path, json=body)
        assert r.status_code == 404, (path, r.text)
        # exactly the answer for a job that does not exist, but for the id it names
        assert r.json() == {"error": {**missing["error"], "message": f"job {b1!r} not found"}}
    # a search by the other tenant's id finds nothing; asking for its tenant is a 404 too
    assert (await http.get("/ui/api/jobs", params={"q": b1})).json()["jobs"] == []
    assert (await http.get("/ui/api/jobs", params={"tenant": "tb"})).status_code == 404
    assert (await http.get("/ui/api/jobs", params={"tenant": "ta"})).status_code == 200
    assert (await http.get(f"/v1/jobs/{b1}", headers={"Authorization": f"Bearer {B}"})).json()["status"] == "queued"

    await sign_in(http, OP)
    listed = (await http.get("/ui/api/jobs")).json()["jobs"]
    assert [(j["job_id"], j["tenant"]) for j in listed] == [(b1, "tb"), (a2, "ta"), (a1, "ta")]
    assert [j["job_id"] for j in (await http.get("/ui/api/jobs", params={"tenant": "tb"})).json()["jobs"]] == [b1]
    assert (await http.get(f"/ui/api/jobs/{b1}")).json()["job"]["tenant"] == "tb"
    r = await http.post(f"/ui/api/jobs/{b1}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"


async def test_filters_search_and_the_job_detail(http):
    a1, a2 = await submit(http, A), await submit(http, A, metadata={"k": "v"})
    await sign_in(http, A)
    assert (await http.post(f"/ui/api/jobs/{a1}/cancel")).json()["status"] == "cancelled"

    async def ids(**params):
        r = await http.get("/ui/api/jobs", params=params)
        assert r.status_code == 200, r.text
        return [j["job_id"] for j in r.json()["jobs"]]

    assert await ids(status="cancelled") == [a1]
    assert await ids(status="queued") == [a2]
    assert await ids(model="m") == [a2, a1]
    assert await ids(model="other") == []
    assert await ids(q=a2) == [a2]
    assert await ids(q=a2[-6:]) == [a2]
    d = (await http.get(f"/ui/api/jobs/{a1}")).json()
    assert d["job"]["status"] == "cancelled" and d["terminal"] is True and d["seq"] == 2
    assert [s["kind"] for s in d["waterfall"]] == ["queue"]
    assert [(m["role"], m["content"]) for m in d["transcript"]] == [("user", "hi")]


async def test_quarantined_jobs_are_marked_filtered_and_counted(http, store):
    """A job whose attempts kept losing their worker (store/lua/claim.lua) wears its mark in
    the list, the `quarantined` filter finds it, and /metrics counts it per model."""
    poisoned, healthy = await submit(http, A), await submit(http, A)
    # its lease has run out: its worker is lost
    await store.start(poisoned, attempt=1, fresh={}, resumed={}, lease_ms=-1, worker="w1")
    [claim] = await Leases(store.redis).claim_expired("m", grace_ms=5000, max_attempts=1)
    assert claim == (poisoned, 2, True)
    assert await quarantine.end_lost(store, poisoned, claim.attempt)
    await sign_in(http, A)

    async def listed(**params):
        r = await http.get("/ui/api/jobs", params=params)
        assert r.status_code == 200, r.text
        return [(j["job_id"], j["quarantined"]) for j in r.json()["jobs"]]

    assert await listed() == [(healthy, False), (poisoned, True)]
    assert await listed(quarantined="true") == [(poisoned, True)]
    assert await listed(quarantined="false") == [(healthy, False)]
    assert await listed(q=poisoned, quarantined="false") == []
    assert (await http.get(f"/ui/api/jobs/{poisoned}")).json()["job"]["quarantined"] is True
    metrics = (await http.get("/metrics", headers={"Authorization": f"Bearer {OP}"})).text
    assert 'toolq_jobs_quarantined{model="m"} 1.0' in metrics


async def test_the_inbox_lists_paused_jobs_of_the_viewer_and_answers_them(http, store):
    ja = await paused_job(store, pending("c1", "approval", name="wire"), tenant="ta")
    jb = await paused_job(store, pending("c2", "client"), tenant="tb")
    await sign_in(http, A)
    inbox = (await http.get("/ui/api/approvals")).json()
    assert [(a["job"]["job_id"], [c["id"] for c in a["calls"]]) for a in inbox] == [(ja, ["c1"])]
    r = await http.post(f"/ui/api/jobs/{ja}/approvals", json=[{"tool_call_id": "c1", "approved": True}])
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert (await http.get("/ui/api/approvals")).json() == []
    # answered twice: the API's 409, as on /v1
    r = await http.post(f"/ui/api/jobs/{ja}/approvals", json=[{"tool_call_id": "c1", "approved": True}])
    assert r.status_code == 409

    await sign_in(http, OP)
    inbox = (await http.get("/ui/api/approvals")).json()
    assert [(a["job"]["job_id"], a["job"]["tenant"], a["calls"][0]["kind"]) for a in inbox] == [(jb, "tb", "client")]
    r = await http.post(f"/ui/api/jobs/{jb}/approvals", json=[{"tool_call_id": "c2", "approved": True}])
    assert r.status_code == 422 and r.json()["error"]["code"] == "wrong_action_kind"
    r = await http.post(f"/ui/api/jobs/{jb}/tool_results", json=[{"tool_call_id": "c2", "content": "42"}])
    assert r.status_code == 200 and r.json()["status"] == "queued"


# ---------------------------------------------------------------------- bad input

BAD_QUERIES = [
    ({"status": "bogus"}, 422),
    ({"status": ""}, 422),
    ({"limit": "0"}, 422),
    ({"limit": str(10**12)}, 422),
    ({"limit": "-5"}, 422),
    ({"limit": "many"}, 422),
    ({"cursor": "garbage"}, 400),
    ({"cursor": "12:"}, 400),
    ({"cursor": "9" * 40 + ":x"}, 400),
    ({"cursor": "x" * 500}, 422),
    ({"q": "x" * 500}, 422),
    ({"model": ""}, 422),
    ({"tenant": "t" * 1000}, 422),
]


@pytest.mark.parametrize(("params", "status"), BAD_QUERIES)
async def test_bad_listing_queries_are_4xx(http, params, status):
    await sign_in(http, OP)
    r = await http.get("/ui/api/jobs", params=params)
    assert r.status_code == status, (params, r.text)
    assert "error" in r.json()


async def test_bad_ids_bodies_and_stream_positions_are_4xx_never_5xx(http, store):
    job = await submit(http, A)
    paused = await paused_job(store, pending("c1", "approval"), tenant="ta")
    await sign_in(http, A)
    weird_ids = ["x" * 129, "%00", "..", "a b", "ü" * 40, "{}", "*", "toolq:job:{x}", "-1"]
    for wid in weird_ids:
        for method, suffix in (("GET", ""), ("GET", "/events"), ("POST", "/cancel")):
            r = await http.request(method, f"/ui/api/jobs/{wid}{suffix}")
            assert r.status_code in (404, 422), (wid, suffix, r.status_code)
    bodies = [
        None,
        {},
        [],
        [{}],
        "x",
        [{"tool_call_id": "c1"}],
        [{"tool_call_id": "c1", "approved": "maybe"}],
        [{"tool_call_id": "c1", "approved": True}] * 1000,
        [{"tool_call_id": "nope", "approved": True}],
    ]
    for body in bodies:
        for what in ("approvals", "tool_results"):
            r = await http.post(f"/ui/api/jobs/{paused}/{what}", json=body)
            assert 400 <= r.status_code < 500, (what, body if not isinstance(body, list) else body[:1], r.text)
    r = await http.post(
        f"/ui/api/jobs/{paused}/approvals", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422
    for params, headers in (
        ({"after": "-1"}, {}),
        ({"after": str(2**70)}, {}),
        ({}, {"Last-Event-ID": "abc"}),
        ({}, {"Last-Event-ID": "9" * 40}),
    ):
        r = await http.get(f"/ui/api/jobs/{job}/events", params=params, headers=headers)
        assert r.status_code in (400, 422), (params, headers, r.status_code)
    assert (await http.get("/ui/api/approvals", params={"limit": "100000"})).status_code == 422
    # the paused job is untouched by all of it
    assert (await http.get(f"/ui/api/jobs/{paused}")).json()["job"]["status"] == "requires_action"


# ---------------------------------------------------------------------- the index


async def test_the_index_pages_without_loss_or_repeat_trims_and_drops_expired_records(store):
    # submitted within a few ms: several share a score, so pages split ties too
    ids = [(await store.submit(Submission(REQUEST, model="m", tenant="t")))[0] for _ in range(7)]
    seen, cursor = [], None
    while True:
        page = await job_index.recent(store.redis, job_index.JobFilter(tenant="t"), limit=3, cursor=cursor)
        seen += [(r.created_ms, r.job_id) for r in page.rows]
        if page.next_cursor is None or not page.rows:
            break
        cursor = page.next_cursor
    assert seen == sorted(seen, reverse=True)  # newest first; ties in reverse id order
    assert sorted(i for _, i in seen) == sorted(ids)

    await store.redis.delete(keys.job(ids[3]))  # expired
    page = await job_index.recent(store.redis, job_index.JobFilter(), limit=50)
    assert [r.job_id for r in page.rows] == [i for _, i in seen if i != ids[3]]
    assert await store.redis.zscore(keys.JOBS_ALL, ids[3]) is None

    store.index_keep = 3
    newest, _ = await store.submit(Submission(REQUEST, model="m", tenant="t"))
    assert await store.redis.zcard(keys.tenant_jobs("t")) == 3
    assert (await store.redis.zrevrange(keys.JOBS_ALL, 0, 0))[0].decode() == newest


def test_operator_keys_and_the_secret_from_the_environment(monkeypatch):
    monkeypatch.setenv("TOOLQ_OPERATOR_KEYS", " op1, op2 ,")
    monkeypatch.setenv("TOOLQ_UI_SECRET", "")
    s = GatewaySettings()
    assert s.operator_keys == ["op1", "op2"] and s.ui_secret is None
    monkeypatch.setenv("TOOLQ_OPERATOR_KEYS", '["a,b"]')
    assert GatewaySettings().operator_keys == ["a,b"]
