"""Threads and runs over real HTTP, real Redis and a real (scripted) worker process: history kept
across runs, a failed or cancelled run appending nothing unless asked, and each double-texting
policy (reject, enqueue, interrupt, rollback) under many runs posted at once."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import time

import httpx
import pytest
import redis

from gateway.settings import GatewaySettings
from store import keys
from tests.integration.gateway_support import CALL_ZORBIX, LiveGateway, private_redis
from tests.support.workers import WorkerProcess, write_rules

KEYS = {"t-key": "acme", "o-key": "globex"}
END = r"\s*<\|im_end\|>\s*<\|im_start\|>assistant\s*\Z"  # the prompt's end: the last message decides
SLOW = "Slowly " * 300  # about a second at the worker's token delay
RULES = [
    (r"TOOLSLOW" + END, CALL_ZORBIX),
    (r"</tool_response>" + END, SLOW),
    (r"SLOW" + END, SLOW),
    (r"(?s)\A.*", "ok"),
]


@pytest.fixture(scope="module")
def env():
    with private_redis() as url:
        worker = WorkerProcess(url, script=write_rules(RULES, token_delay_s=0.004)).wait_ready()
        gw = LiveGateway(GatewaySettings(redis_url=url, api_keys=KEYS, fleet_cache_s=0)).start()
        try:
            yield gw, url
        finally:
            gw.stop()
            worker.stop()


@pytest.fixture
def http(env):
    gw, _ = env
    with httpx.Client(base_url=gw.url, headers={"Authorization": "Bearer t-key"}, timeout=30) as c:
        yield c


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def new_thread(http: httpx.Client, **body) -> str:
    r = http.post("/v1/threads", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def run(http: httpx.Client, tid: str, text: str, strategy: str = "reject", **extra) -> httpx.Response:
    return http.post(
        f"/v1/threads/{tid}/runs", json={"messages": [user(text)], "multitask_strategy": strategy, **extra}
    )


def job(http: httpx.Client, job_id: str) -> dict:
    return http.get(f"/v1/jobs/{job_id}").json()


def wait_end(http: httpx.Client, job_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        j = job(http, job_id)
        if j["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return j
        time.sleep(0.05)


def wait_event(http: httpx.Client, job_id: str, kind: str, timeout: float = 20) -> None:
    with http.stream("GET", f"/v1/jobs/{job_id}/events", timeout=timeout) as r:
        for line in r.iter_lines():
            if line == f"event: {kind}":
                return
    raise AssertionError(f"no {kind} event in job {job_id}")


def messages(http: httpx.Client, tid: str) -> list[dict]:
    r = http.get(f"/v1/threads/{tid}/messages", params={"limit": 100})
    assert r.status_code == 200, r.text
    return [m["message"] for m in r.json()["data"]]


def events(redis_url: str, job_id: str) -> list[dict]:
    r = redis.Redis.from_url(redis_url)
    return [json.loads(f[b"e"]) for _, f in r.xrange(keys.log(job_id))]


def test_a_thread_is_created_read_in_pages_listed_and_deleted(http, env):
    _, url = env
    tid = new_thread(http, metadata={"team": "blue"}, ttl_s=600, messages=[user("a"), user("b"), user("c")])
    first = http.get(f"/v1/threads/{tid}", params={"limit": 2}).json()
    assert first["metadata"] == {"team": "blue"} and first["ttl_s"] == 600 and first["message_count"] == 3
    assert [m["message"]["content"] for m in first["messages"]["data"]] == ["a", "b"]
    assert first["messages"]["has_more"]
    rest = http.get(f"/v1/threads/{tid}", params={"after": first["messages"]["last_id"]}).json()["messages"]
    assert [m["message"]["content"] for m in rest["data"]] == ["c"] and not rest["has_more"]
    newest = http.get(f"/v1/threads/{tid}/messages", params={"order": "desc", "limit": 1}).json()
    assert newest["data"][0]["message"]["content"] == "c"
    assert 0 < redis.Redis.from_url(url).ttl(keys.thread(tid)) <= 600

    assert tid in [t["id"] for t in http.get("/v1/threads").json()["data"]]
    other = httpx.Client(base_url=http.base_url, headers={"Authorization": "Bearer o-key"})
    assert other.get(f"/v1/threads/{tid}").status_code == 404
    assert tid not in [t["id"] for t in other.get("/v1/threads").json()["data"]]
    assert run(other, tid, "hi").status_code == 404

    assert http.delete(f"/v1/threads/{tid}").json() == {"id": tid, "object": "thread.deleted", "deleted": True}
    gone = http.get(f"/v1/threads/{tid}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "thread_not_found"


def test_runs_see_the_thread_first_and_append_what_they_did(http):
    tid = new_thread(http, messages=[{"role": "system", "content": "Be brief."}])
    first = run(http, tid, "Calculate the zorbix")
    assert first.status_code == 202 and first.json()["state"] == "started", first.text
    assert wait_end(http, first.json()["job_id"])["status"] == "succeeded"
    second = run(http, tid, "And now?").json()
    done = wait_end(http, second["job_id"])
    assert done["status"] == "succeeded"
    thread = messages(http, tid)
    assert [m["role"] for m in thread] == ["system", "user", "assistant", "user", "assistant"]
    assert [m.get("content") for m in thread] == ["Be brief.", "Calculate the zorbix", "ok", "And now?", "ok"]
    # the second job saw the thread as it was, then its input
    seen = done["result"]["messages"]
    assert [(m["role"], m["content"]) for m in seen[:4]] == [(m["role"], m["content"]) for m in thread[:4]]


def test_a_cancelled_run_appends_nothing_unless_it_keeps_partial_history(http):
    tid = new_thread(http)
    plain = run(http, tid, "TOOLSLOW").json()["job_id"]
    wait_event(http, plain, "tool_result")
    http.post(f"/v1/jobs/{plain}/cancel")
    assert wait_end(http, plain)["status"] == "cancelled"
    assert messages(http, tid) == []

    kept = run(http, tid, "TOOLSLOW", partial_history=True).json()["job_id"]
    wait_event(http, kept, "tool_result")
    http.post(f"/v1/jobs/{kept}/cancel")
    assert wait_end(http, kept)["status"] == "cancelled"
    thread = messages(http, tid)
    assert [m["role"] for m in thread] == ["user", "assistant", "tool"]
    assert thread[1]["tool_calls"][0]["function"]["name"] == "calculate_zorbix" and thread[2]["content"] == "22"


def post_many(http: httpx.Client, tid: str, texts: list[str], strategy: str) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(lambda t: run(http, tid, t, strategy), texts))


def test_reject_lets_exactly_one_of_many_runs_posted_at_once_start(http):
    tid = new_thread(http)
    answers = post_many(http, tid, [f"{i} SLOW" for i in range(20)], "reject")
    accepted = [r for r in answers if r.status_code == 202]
    refused = [r for r in answers if r.status_code == 409]
    assert len(accepted) == 1 and len(refused) == 19, [r.status_code for r in answers]
    active = accepted[0].json()["job_id"]
    assert all(r.json()["error"]["code"] == "run_active" and active in r.json()["error"]["message"] for r in refused)
    assert [r["job_id"] for r in http.get(f"/v1/threads/{tid}/runs").json()["data"]] == [active]
    assert wait_end(http, active)["status"] == "succeeded"
    assert run(http, tid, "after").status_code == 202  # the thread is free again


def test_enqueue_runs_every_one_of_many_in_turn_never_two_at_once(http, env):
    _, url = env
    tid = new_thread(http)
    first = run(http, tid, "SLOW").json()["job_id"]
    texts = [f"run {i}" for i in range(12)]
    answers = post_many(http, tid, texts, "enqueue")
    assert all(r.status_code == 202 for r in answers), [r.text for r in answers if r.status_code != 202]
    assert all(r.json()["state"] == "waiting" and r.json()["active_run"] == first for r in answers)
    ids = [first] + [r.json()["job_id"] for r in answers]
    assert all(wait_end(http, j)["status"] == "succeeded" for j in ids)
    # one at a time: each run started after the one before it ended
    spans = sorted(
        (next(e["ts"] for e in events(url, j) if e["type"] == "started"), events(url, j)[-1]["ts"], j) for j in ids
    )
    assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(spans))
    # and each saw every earlier run's input and answer
    for k, (_, _, j) in enumerate(spans):
        assert len(job(http, j)["result"]["messages"]) == 2 * k + 2
    thread = messages(http, tid)
    assert len(thread) == 26 and sorted(m["content"] for m in thread[2::2]) == sorted(texts)
    # the runs list is in the order they took their turns
    assert [r["job_id"] for r in http.get(f"/v1/threads/{tid}/runs").json()["data"]] == [j for _, _, j in spans]


def settle(http: httpx.Client, answers: list[httpx.Response]) -> dict[str, str]:
    """job id -> how it ended, for runs posted at once."""
    assert all(r.status_code == 202 for r in answers), [r.text for r in answers if r.status_code != 202]
    return {r.json()["job_id"]: wait_end(http, r.json()["job_id"])["status"] for r in answers}


def test_interrupt_stops_the_active_run_and_keeps_its_partial_history(http):
    """Each interrupter stops the run active when it arrives: the first run, or a newcomer that
    started meanwhile. Every stopped run keeps what it did; the last newcomer runs to its end."""
    tid = new_thread(http)
    active = run(http, tid, "TOOLSLOW").json()["job_id"]
    wait_event(http, active, "tool_result")
    answers = post_many(http, tid, [f"new {i}" for i in range(8)], "interrupt")
    # one that arrives once every earlier run has ended starts at once
    assert {r.json()["state"] for r in answers} <= {"interrupting", "started"}
    assert any(r.json()["active_run"] == active for r in answers)
    ended = settle(http, answers)
    assert wait_end(http, active)["status"] == "cancelled"
    assert set(ended.values()) <= {"succeeded", "cancelled"} and "succeeded" in ended.values()
    runs = [r["job_id"] for r in http.get(f"/v1/threads/{tid}/runs").json()["data"]]
    assert runs[0] == active and sorted(runs[1:]) == sorted(ended)
    assert ended[runs[-1]] == "succeeded"  # nobody interrupted the last one
    thread = messages(http, tid)
    # the interrupted run's input, call and tool result; then every newcomer's input (partial
    # history of a stopped one), followed by its answer when it finished
    assert [m["role"] for m in thread[:3]] == ["user", "assistant", "tool"] and thread[0]["content"] == "TOOLSLOW"
    inputs = [m["content"] for m in thread[3:] if m["role"] == "user"]
    assert sorted(inputs) == sorted(f"new {i}" for i in range(8))
    assert len(thread) == 3 + 8 + sum(s == "succeeded" for s in ended.values())


def test_rollback_stops_the_active_run_and_erases_it(http):
    """Each rollback stops and erases the run active when it arrives; what is left is exactly
    the runs nobody rolled back, each with its input and answer."""
    tid = new_thread(http, messages=[user("kept")])
    active = run(http, tid, "TOOLSLOW").json()["job_id"]
    wait_event(http, active, "tool_result")
    answers = post_many(http, tid, [f"instead {i}" for i in range(6)], "rollback")
    ended = settle(http, answers)
    assert wait_end(http, active)["status"] == "cancelled"
    assert set(ended.values()) <= {"succeeded", "cancelled"}
    runs = [r["job_id"] for r in http.get(f"/v1/threads/{tid}/runs").json()["data"]]
    # the runs nobody rolled back all finished; a rolled-back one left the list, whether it was
    # stopped or finished in the same instant (its answer is erased all the same)
    assert runs and active not in runs and all(ended[j] == "succeeded" for j in runs)
    thread = messages(http, tid)
    assert thread[0]["content"] == "kept" and "TOOLSLOW" not in [m["content"] for m in thread]
    assert len(thread) == 1 + 2 * len(runs)
    inputs = [job(http, j)["result"]["messages"][-2]["content"] for j in runs]
    assert [m["content"] for m in thread[1::2]] == inputs


def test_deleting_a_thread_cancels_its_runs(http):
    tid = new_thread(http)
    active = run(http, tid, "SLOW").json()["job_id"]
    waiting = run(http, tid, "later", "enqueue").json()["job_id"]
    assert http.delete(f"/v1/threads/{tid}").status_code == 200
    assert wait_end(http, active)["status"] == "cancelled"
    assert wait_end(http, waiting)["status"] == "cancelled"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/threads", {"ttl_s": 0}, "ttl_s"),
        ("/v1/threads", {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ("/v1/threads", {"metadata": {"k": "v" * 513}}, "metadata"),
        ("/v1/threads", {"messages": [{"role": "user"}]}, "messages[0]"),
        ("/v1/threads", {"colour": "red"}, "colour"),
        ("RUN", {"messages": []}, "messages"),
        ("RUN", {"messages": [{"role": "user", "content": "x"}], "multitask_strategy": "later"}, "multitask_strategy"),
        ("RUN", {"messages": [{"role": "user", "content": "x"}], "model": "nope"}, "model"),
        ("RUN", {"messages": [{"role": "user", "content": "x"}], "idempotency_key": "k"}, "idempotency_key"),
    ],
)
def test_bad_input_is_a_4xx_that_names_the_field(http, path, body, field):
    if path == "RUN":
        path = f"/v1/threads/{new_thread(http)}/runs"
    r = http.post(path, json=body)
    assert 400 <= r.status_code < 500, r.text
    err = r.json()["error"]
    assert err["field"] and err["field"].startswith(field), err


def test_a_page_after_an_unknown_message_is_a_422_naming_after(http):
    tid = new_thread(http, messages=[user("a")])
    r = http.get(f"/v1/threads/{tid}", params={"after": "msg_nope"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "after"


def test_the_sdk_runs_a_thread_and_reads_it_back(env):
    from toolq import errors
    from toolq.client import SyncClient

    gw, _ = env
    with SyncClient(gw.url, "t-key") as client:
        t = client.create_thread(metadata={"via": "sdk"}, messages=[{"role": "system", "content": "Be brief."}])
        accepted = client.run_thread(t.id, "hello")
        assert accepted.thread_id == t.id and accepted.state == "started"
        assert client._run(client._client.result(accepted.job_id, timeout=30)).content == "ok"
        assert [(m.role, m.content) for m in client.thread_messages(t.id)] == [
            ("system", "Be brief."),
            ("user", "hello"),
            ("assistant", "ok"),
        ]
        assert client.thread(t.id).message_count == 3 and t.id in [x.id for x in client.threads().data]
        assert client.delete_thread(t.id).deleted
        with pytest.raises(errors.ThreadNotFoundError):
            client.thread(t.id)


def test_the_cli_creates_runs_shows_and_deletes_a_thread(env):
    import subprocess
    import sys

    gw, _ = env

    def toolq(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "toolq", "threads", *args, "--url", gw.url, "--api-key", "t-key"],
            capture_output=True,
            text=True,
            timeout=60,
        )

    made = toolq("create", "--metadata", "via=cli", "--ttl", "3600")
    assert made.returncode == 0, made.stderr
    tid = json.loads(made.stdout)["id"]
    answered = toolq("run", tid, "hello there")
    assert answered.returncode == 0 and answered.stdout.strip() == "ok", answered.stderr
    shown = json.loads(toolq("show", tid).stdout)
    assert shown["metadata"] == {"via": "cli"} and [m["content"] for m in shown["messages"]] == ["hello there", "ok"]
    assert tid in toolq("list").stdout
    assert toolq("delete", tid).returncode == 0
    missing = toolq("show", tid)
    assert missing.returncode == 2 and "not found" in missing.stderr


def test_a_thread_with_a_ttl_does_not_expire_while_a_run_is_active(http, env):
    _, url = env
    r = redis.Redis.from_url(url)
    tid = new_thread(http, ttl_s=60)
    active = run(http, tid, "SLOW").json()["job_id"]
    run(http, tid, "next", "enqueue")
    assert r.ttl(keys.thread(tid)) == -1 and r.ttl(keys.thread_waiting(tid)) == -1  # kept while busy
    wait_end(http, active)
    deadline = time.monotonic() + 20
    while r.hget(keys.thread(tid), "active") != b"" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 0 < r.ttl(keys.thread(tid)) <= 60 and 0 < r.ttl(keys.thread_messages(tid)) <= 60
