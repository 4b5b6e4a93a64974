"""A real headless Chromium for the dashboard's browser tests: Debian's ``chromium`` driven by
Playwright for Python (whose own browser download cannot be reached here), launched by path.

Missing Playwright or Chromium skips the test with the reason, except under CI=true, where it
fails: .ci/run installs Chromium, and the test extra installs Playwright.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from toolq.testing.engine import in_ci

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str:
    """The Chromium to launch (``TOOLQ_CHROMIUM`` or the first on PATH); skips, or fails in CI."""
    found = os.environ.get("TOOLQ_CHROMIUM") or next(filter(None, map(shutil.which, CANDIDATES)), None)
    reason = None
    if not found or not Path(found).exists():
        reason = "no Chromium found (apt-get install -y chromium, or set TOOLQ_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "Playwright for Python is not installed (pip install -e '.[test]')"
    if reason:
        if in_ci():
            pytest.fail(f"CI=true and the browser tests cannot run: {reason}")
        pytest.skip(reason)
    assert found is not None
    return found


def screenshot_dir(root: Path) -> Path:
    """Where the screenshots go: ``TOOLQ_UI_SCREENSHOTS`` or ``<repo>/test-artifacts/ui`` (ignored by git)."""
    d = Path(os.environ.get("TOOLQ_UI_SCREENSHOTS") or root / "test-artifacts" / "ui")
    d.mkdir(parents=True, exist_ok=True)
    return d


def signed_in(browser, gateway: str, key: str, viewport=LAPTOP):
    """A fresh browser context signed in through the sign-in page with ``key``."""
    ctx = browser.new_context(viewport=viewport, base_url=gateway)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto("/ui/jobs")
    page.wait_for_url("**/ui/login")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui")
    # The header's "who" is filled once the dashboard's session read answers, after the URL settles.
    page.wait_for_function("document.querySelector('[data-test=who]')?.textContent.trim()")
    page.errors = errors  # type: ignore[attr-defined]
    return ctx, page


def submit(gateway: str, key: str, body: dict) -> str:
    r = httpx.post(f"{gateway}/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert r.status_code == 202, r.text
    return r.json()["job_id"]
