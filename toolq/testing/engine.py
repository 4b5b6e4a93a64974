"""The Docker engine as tests meet it: does one answer, and containers this process owns.

testcontainers' reaper (Ryuk) is an image of its own that must be pulled, which machines without a
registry cannot: it is disabled unless ``TESTCONTAINERS_RYUK_DISABLED`` says otherwise, and this
process removes what it started instead. Every container it starts carries its pid
(``OWNER_LABEL``); ``sweep_orphans`` removes those of processes that are gone (a test run killed
before its teardown), so a killed run leaks nothing past the next one.
"""

from __future__ import annotations

import os
from typing import Any

OWNER_LABEL = "org.toolq.testing.pid"


def docker_unavailable() -> str | None:
    """None when a Docker engine answers, else one line that says why not."""
    try:
        import docker
    except ImportError:
        return "the docker package is not installed (pip install 'toolq[testing]')"
    try:
        docker.from_env(timeout=3).ping()
    except Exception as e:
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        return f"no Docker engine answers at {where} ({type(e).__name__})"
    return None


def in_ci() -> bool:
    """CI=true: a test that needs Docker fails there instead of skipping."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def prepare_testcontainers() -> None:
    """Turn Ryuk off (unless the environment chose) before testcontainers starts anything."""
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.config import testcontainers_config

    testcontainers_config.ryuk_disabled = os.environ["TESTCONTAINERS_RYUK_DISABLED"].strip().lower() in (
        "1",
        "true",
        "yes",
    )


def owner_labels() -> dict[str, str]:
    return {OWNER_LABEL: str(os.getpid())}


def sweep_orphans(client: Any) -> int:
    """Remove containers and networks left by toolq test processes that no longer run; how many."""
    removed = 0
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        if not _alive(container.labels.get(OWNER_LABEL, "")):
            container.remove(force=True, v=True)
            removed += 1
    for network in client.networks.list(filters={"label": OWNER_LABEL}):
        if not _alive(network.attrs.get("Labels", {}).get(OWNER_LABEL, "")):
            network.remove()
    return removed


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
