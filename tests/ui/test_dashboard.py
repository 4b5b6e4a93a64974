"""The dashboard in a real headless Chromium (Debian's, through Playwright: tests/support/browser.py)
against a live gateway and a real worker process on a Redis of their own. The worker's engine is
scripted (worker/scripted.py) so that what the pages must show is known and slow enough to watch:
tokens stream at a set pace, a tool call pauses for approval, a long reply can be cancelled.

Screenshots of every page at a laptop's and a phone's width go to ``test-artifacts/ui/`` (or
``TOOLQ_UI_SCREENSHOTS``); the module prints the folder."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway.settings import GatewaySettings
from store import quarantine
from store.jobstore import JobStore
from store.leases import Leases
from store.submission import Submission
from tests.integration.gateway_support import CALL_ZORBIX, private_redis, served
from tests.support.browser import LAPTOP, PHONE, chromium_path, screenshot_dir, signed_in, submit
from tests.support.workers import REPO, write_rules
from toolq.wire.protocol import JobRequest

pytestmark = pytest.mark.timeout(300)

A, B, OP = "ui-key-a", "ui-key-b", "ui-key-operator"
SLOW = "Tell me a very long story"
STORY = "Once upon a time there was a queue. " * 120  # 4,300 characters: 20 s at the pace below
ANSWER = "The answer is 22. " + "That is the zorbix of 15 and 7, computed by the tool. " * 5
RULES = [("<tool_response>\n", ANSWER), (SLOW, STORY), ("", CALL_ZORBIX)]
PACE_S = 0.02  # per 4-character token
GATED = {"type": "function", "function": {"name": "calculate_zorbix"}, "execution": "server", "requires_approval": True}
USER = {"role": "user", "content": "Calculate the zorbix of 15 and 7"}


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_path()


@pytest.fixture(scope="module")
def stack(chromium) -> Iterator[tuple[str, str]]:
    """The gateway's URL and its Redis's."""
    settings_of = lambda url: GatewaySettings(  # noqa: E731
        redis_url=url, fleet_cache_s=0, api_keys={A: "ta", B: "tb"}, operator_keys=[OP], keepalive_s=1
    )
    with private_redis() as url, served(url, settings_of(url), script=write_rules(RULES, PACE_S)) as gw:
        yield gw.url, url


@pytest.fixture(scope="module")
def gateway(stack) -> str:
    return stack[0]


@pytest.fixture(scope="module")
def shots() -> Path:
    d = screenshot_dir(Path(REPO))
    print(f"\nscreenshots of the dashboard: {d}")
    return d


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


def status_of(gateway: str, key: str, job_id: str) -> str:
    r = httpx.get(f"{gateway}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return r.json()["status"]


def shoot(page, shots: Path, name: str) -> None:
    """The page at a laptop's width, then at a phone's (the layout must hold at both)."""
    for label, size in (("laptop", LAPTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(shots / f"{name}-{label}.png"), full_page=True)
        # nothing wider than the screen at a phone's width but the scrolling tables
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"{name} at {label} width overflows by {overflow}px"
    page.set_viewport_size(LAPTOP)


def test_a_job_s_timeline_fills_in_live_with_its_call_result_tokens_and_answer(browser, gateway, shots):
    ctx, page = signed_in(browser, gateway, A)
    try:
        page.wait_for_selector("[data-test=worker]")  # the overview shows the live worker
        assert page.text_content("[data-test=who]") == "tenant ta"
        job_id = submit(
            gateway, A, {"messages": [USER], "tools": ["calculate_zorbix"], "stream_tokens": True, "max_tokens": 400}
        )
        page.goto(f"/ui/jobs/{job_id}")
        timeline = page.locator("[data-test=timeline] li")
        page.wait_for_selector("[data-test=timeline] li[data-type=tool_result]", timeout=30_000)
        # the result is in, the answer is still being written: the page shows it as it comes
        assert page.locator("[data-test=timeline] li[data-type=final]").count() == 0
        call = page.locator("[data-test=timeline] li[data-type=tool_call]").first
        assert "calculate_zorbix" in call.text_content() and '"zorb": 15' in call.text_content()
        result = page.locator("[data-test=timeline] li[data-type=tool_result]").first
        assert "22" in result.text_content() and "ran on worker" in result.text_content()
        streamed = page.locator("[data-test=timeline] li[data-type=token]").last
        streamed.wait_for()
        first = len(streamed.text_content())
        page.wait_for_function(
            "n => { const t = document.querySelectorAll('[data-test=timeline] li[data-type=token]');"
            " return t.length && t[t.length - 1].textContent.length > n; }",
            arg=first,
            timeout=10_000,
        )
        page.wait_for_selector("[data-test=timeline] li[data-type=final]", timeout=30_000)
        assert "The answer is 22." in page.locator("[data-test=timeline] li[data-type=final]").text_content()
        types = [li.get_attribute("data-type") for li in timeline.all()]
        assert types[:3] == ["queued", "started", "token"] or types[:2] == ["queued", "started"]
        assert types[-1] == "final"
        page.wait_for_selector("[data-test=status].succeeded")
        page.wait_for_selector("[data-test=usage] dd")
        bars = page.locator("[data-test=waterfall] .bar-row")
        labels = [b.text_content() for b in bars.all()]
        assert any("queue" in t for t in labels) and any("round 2: generate" in t for t in labels)
        assert any("calculate_zorbix" in t for t in labels)
        assert "Calculate the zorbix" in page.text_content("[data-test=transcript]")
        assert not page.errors, page.errors  # type: ignore[attr-defined]
        shoot(page, shots, "job")

        page.goto("/ui/jobs")
        page.wait_for_selector(f"[data-test=jobs] a:text('{job_id}')")
        shoot(page, shots, "jobs")
        page.goto("/ui")
        page.wait_for_selector("[data-test=worker]")
        page.wait_for_timeout(2500)  # two readings: the rates and charts have points
        shoot(page, shots, "overview")
    finally:
        ctx.close()


def test_a_call_that_needs_approval_is_approved_from_the_inbox_and_the_job_finishes(browser, gateway, shots):
    job_id = submit(gateway, A, {"messages": [USER], "tools": [GATED], "max_tokens": 400})
    ctx, page = signed_in(browser, gateway, A)
    try:
        page.goto("/ui/approvals")
        card = page.locator(f"[data-test=approval][data-job-id='{job_id}']")
        card.wait_for(timeout=30_000)
        assert "calculate_zorbix" in card.text_content() and "needs approval" in card.text_content()
        shoot(page, shots, "approvals")
        card.locator("[data-test=approve]").click()
        card.wait_for(state="detached", timeout=10_000)
        deadline = time.monotonic() + 30
        while status_of(gateway, A, job_id) != "succeeded":
            assert time.monotonic() < deadline, status_of(gateway, A, job_id)
            time.sleep(0.2)
        page.goto(f"/ui/jobs/{job_id}")
        page.wait_for_selector("[data-test=status].succeeded")
        page.wait_for_selector("[data-test=timeline] li[data-type=final]")
        assert page.locator("[data-test=timeline] li[data-type=requires_action]").count() == 1
        labels = " ".join(b.text_content() for b in page.locator("[data-test=waterfall] .bar-row").all())
        assert "waiting on the caller" in labels and "queue (resumed)" in labels
        assert not page.errors, page.errors  # type: ignore[attr-defined]
    finally:
        ctx.close()


def test_a_running_job_is_cancelled_from_its_page(browser, gateway, shots):
    job_id = submit(
        gateway, A, {"messages": [{"role": "user", "content": SLOW}], "stream_tokens": True, "max_tokens": 2000}
    )
    ctx, page = signed_in(browser, gateway, A)
    try:
        page.goto(f"/ui/jobs/{job_id}")
        page.wait_for_selector("[data-test=timeline] li[data-type=token]", timeout=30_000)
        assert status_of(gateway, A, job_id) == "running"
        page.click("[data-test=cancel]")
        page.wait_for_selector("[data-test=timeline] li[data-type=cancelled]", timeout=15_000)
        page.wait_for_selector("[data-test=status].cancelled")
        assert page.locator("[data-test=cancel]").is_hidden()
        assert status_of(gateway, A, job_id) == "cancelled"
        shoot(page, shots, "job-cancelled")
    finally:
        ctx.close()


def test_a_second_tenant_cannot_see_the_first_tenant_s_job_and_an_operator_can(browser, gateway, shots):
    job_id = submit(gateway, A, {"messages": [USER], "tools": [GATED], "max_tokens": 400})
    deadline = time.monotonic() + 30
    while status_of(gateway, A, job_id) != "requires_action":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ctx, page = signed_in(browser, gateway, B)
    try:
        assert page.text_content("[data-test=who]") == "tenant tb"
        page.goto(f"/ui/jobs/{job_id}")
        page.wait_for_selector("[data-test=job-error]:visible")
        assert page.text_content("[data-test=job-error]") == f"job {job_id!r} not found"
        assert page.locator("[data-test=timeline] li").count() == 0
        page.goto("/ui/jobs")
        page.wait_for_selector("[data-test=jobs] tbody tr")
        assert job_id not in page.text_content("[data-test=jobs]")
        page.fill("[data-test=q]", job_id)
        page.press("[data-test=q]", "Enter")
        page.wait_for_selector("text=No jobs match.")
        page.goto("/ui/approvals")
        page.wait_for_selector("[data-test=empty]:visible")
        assert job_id not in page.content()
        shoot(page, shots, "other-tenant")
    finally:
        ctx.close()
    ctx, page = signed_in(browser, gateway, OP)
    try:
        assert page.text_content("[data-test=who]") == "operator"
        page.goto("/ui/approvals")
        page.locator(f"[data-test=approval][data-job-id='{job_id}']").wait_for()
        page.goto("/ui/jobs?tenant=ta")
        page.wait_for_selector(f"[data-test=jobs] a:text('{job_id}')")
        shoot(page, shots, "operator-jobs")
    finally:
        ctx.close()


def test_the_sign_in_page_refuses_a_wrong_key(browser, gateway, shots):
    ctx = browser.new_context(viewport=PHONE, base_url=gateway)
    try:
        page = ctx.new_page()
        page.goto("/ui/login")
        page.fill("#key", "not-a-key")
        page.click("button[type=submit]")
        page.wait_for_selector("[data-test=login-error]:visible")
        assert "neither an API key nor an operator key" in page.text_content("[data-test=login-error]")
        assert ctx.cookies() == []
        shoot(page, shots, "login")
    finally:
        ctx.close()


def test_a_quarantined_job_wears_its_badge_and_the_filter_finds_it(browser, stack, shots):
    """A job whose attempts kept losing their worker (store/lua/claim.lua), made in Redis as
    the takeover leaves it, on a model no worker serves so that nothing else runs it."""
    gateway, redis_url = stack

    async def poisoned() -> str:
        store = JobStore.from_url(redis_url)
        try:
            job_id, _ = await store.submit(
                Submission(JobRequest.model_validate({"messages": [USER]}), model="gone", tenant="ta")
            )
            await store.start(job_id, attempt=1, fresh={}, resumed={}, lease_ms=-1, worker="w1")
            [claim] = await Leases(store.redis).claim_expired("gone", grace_ms=5000, max_attempts=1)
            assert claim.quarantine and await quarantine.end_lost(store, job_id, claim.attempt)
            return job_id
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's event loop
        job_id = pool.submit(asyncio.run, poisoned()).result()
    other = submit(gateway, A, {"messages": [USER], "max_tokens": 50})
    ctx, page = signed_in(browser, gateway, A)
    try:
        page.goto("/ui/jobs")
        row = page.locator("[data-test=jobs] tbody tr", has=page.locator(f"a:text('{job_id}')"))
        row.locator("[data-test=quarantined-badge]").wait_for()
        assert row.locator(".status.failed").count() == 1
        page.wait_for_selector(f"[data-test=jobs] a:text('{other}')")
        assert page.locator(f"[data-test=jobs] tr:has(a:text('{other}')) [data-test=quarantined-badge]").is_hidden()
        page.check("[data-test=quarantined]")
        page.click("form.filters button[type=submit]")
        page.wait_for_selector(f"[data-test=jobs] a:text('{other}')", state="detached")
        assert [a.text_content() for a in page.locator("[data-test=jobs] tbody a").all()] == [job_id]
        assert not page.errors, page.errors  # type: ignore[attr-defined]
        shoot(page, shots, "jobs-quarantined")
    finally:
        ctx.close()


def test_a_batch_shows_its_progress_and_links_each_line_to_its_job(browser, gateway, shots):
    line = {"method": "POST", "url": "/v1/chat/completions"}
    body = {"model": "scripted", "messages": [USER], "toolq": {"server_tools": ["calculate_zorbix"]}}
    text = "\n".join(json.dumps({**line, "custom_id": f"z{i}", "body": body}) for i in range(3)) + "\n"
    h = {"Authorization": f"Bearer {A}"}
    up = httpx.post(
        f"{gateway}/v1/files", headers=h, files={"file": ("in.jsonl", text.encode())}, data={"purpose": "batch"}
    )
    assert up.status_code == 200, up.text
    form = {"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = httpx.post(f"{gateway}/v1/batches", headers=h, json=form).json()
    ctx, page = signed_in(browser, gateway, A)
    try:
        page.goto("/ui/batches")
        card = page.locator(f"[data-test=batch][data-batch-id='{batch['id']}']")
        card.wait_for()
        page.locator(f"[data-test=batch][data-batch-id='{batch['id']}'][data-status=completed]").wait_for(
            timeout=60_000
        )
        assert "3 of 3 lines · 3 completed · 0 failed" in card.locator("[data-test=counts]").text_content()
        card.locator("h2 a").click()
        links = card.locator("[data-test=line-job]")
        links.first.wait_for()
        assert links.count() == 3
        shoot(page, shots, "batches")
        job_id = links.first.text_content()
        links.first.click()
        page.wait_for_url(f"**/ui/jobs/{job_id}")
        page.wait_for_selector("[data-test=timeline] li")
    finally:
        ctx.close()
    ctx, page = signed_in(browser, gateway, B)
    try:
        page.goto("/ui/batches")
        page.wait_for_selector("[data-test=empty]:visible")
        assert batch["id"] not in page.content()
    finally:
        ctx.close()
