"""The compose profile ``ha`` (docker-compose.yml, deploy/ha.env): a replica of ``redis`` and three
sentinels, with every toolq service given the sentinels' URL.

- ``docker compose --profile ha --env-file deploy/ha.env config``: the five Redis services are
  there, and the gateway, the webhook sender and the worker take ``redis+sentinel://`` and WAIT;
  without the profile, none of them and the plain URL.
- The Redis part of it, started for real from the redis image (or its stand-in,
  scripts/docker-standins.sh): the sentinels agree on the primary, promote the replica when the
  primary's container is killed, and make the old primary a replica when it is back.

Needs a Docker engine and `docker compose` v2: skips without them, fails under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from store.redis_urls import parse_sentinel
from toolq.testing.engine import in_ci
from toolq.testing.plugin import require_docker

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
HA = ["--profile", "ha", "--env-file", "deploy/ha.env"]
REDIS_PARTS = ["redis", "redis-replica", "redis-sentinel-1", "redis-sentinel-2", "redis-sentinel-3"]
TOOLQ_SERVICES = ["gateway", "webhooks", "worker-cpu"]


def compose(project: str, *args: str, timeout: float = 180, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLQ_")}  # the file's defaults
    out = subprocess.run(
        ["docker", "compose", "-p", project, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and out.returncode != 0:
        raise AssertionError(f"docker compose {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


@pytest.fixture(scope="module")
def project() -> str:
    require_docker()
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        reason = "`docker compose` (v2) is not installed: bash scripts/docker-engine.sh"
        pytest.fail(f"CI=true: {reason}", pytrace=False) if in_ci() else pytest.skip(reason)
    return f"toolq-ha-{os.getpid()}"


def test_the_ha_profile_points_every_service_at_the_sentinels(project):
    services = json.loads(compose(project, *HA, "config", "--format", "json"))["services"]
    assert set(REDIS_PARTS) <= set(services)
    for name in TOOLQ_SERVICES:
        env = services[name]["environment"]
        url = parse_sentinel(env["TOOLQ_REDIS_URL"])  # a Sentinel URL toolq takes
        assert [h for h, _ in url.sentinels] == ["redis-sentinel-1", "redis-sentinel-2", "redis-sentinel-3"], name
        assert url.service == "toolq", name
        assert env["TOOLQ_REDIS_WAIT_REPLICAS"] == "1", name
    plain = json.loads(compose(project, "config", "--format", "json"))["services"]
    assert not set(REDIS_PARTS[1:]) & set(plain)
    assert {plain[n]["environment"]["TOOLQ_REDIS_URL"] for n in TOOLQ_SERVICES} == {"redis://redis:6379/0"}


def _master(project: str) -> str | None:
    out = subprocess.run(
        ["docker", "compose", "-p", project, *HA, "exec", "-T", "redis-sentinel-1",
         "redis-cli", "-p", "26379", "sentinel", "get-master-addr-by-name", "toolq"],
        cwd=REPO, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def _replica_known(project: str) -> bool:
    """Every sentinel has found the replica and the other sentinels (each learns it from the primary's INFO, every 10 s):
    the one elected to fail over may be any of them, and one that knows no replica aborts the
    failover (`-failover-abort-no-good-slave`) and is tried again only after twice the
    failover-timeout."""
    for sentinel in REDIS_PARTS[2:]:
        out = compose(project, *HA, "exec", "-T", sentinel, "redis-cli", "-p", "26379",
                      "sentinel", "master", "toolq", check=False).split()  # fmt: skip
        seen = dict(zip(out[::2], out[1::2], strict=False))
        if int(seen.get("num-slaves", 0)) < 1 or int(seen.get("num-other-sentinels", 0)) < 2:
            return False  # the election needs the others too
    return True


def _wait(what: str, check, timeout: float = 90.0, project: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    # the sentinels' events (+sdown, +elected-leader, -failover-abort-...), not their retries' noise
    logs = compose(project, *HA, "logs", "--no-color", *REDIS_PARTS[2:], check=False) if project else ""
    events = "\n".join(line for line in logs.splitlines() if " +" in line or " -" in line)
    raise AssertionError(f"not within {timeout} s: {what}\n{events[-6000:]}")


def test_the_sentinels_fail_over_and_take_the_old_primary_back(project):
    try:
        compose(project, *HA, "up", "--detach", "--wait", "--wait-timeout", "120", *REDIS_PARTS, timeout=300)
        _wait("the sentinels name `redis` the primary", lambda: _master(project) == "redis")
        _wait("the sentinels know the replica", lambda: _replica_known(project))
        compose(project, *HA, "kill", "redis")
        _wait("the replica promoted", lambda: _master(project) == "redis-replica", 90.0, project)
        compose(project, *HA, "start", "redis")

        def redis_is_replica() -> bool:
            out = compose(project, *HA, "exec", "-T", "redis", "redis-cli", "role", check=False)
            return out.split()[:1] == ["slave"] and "redis-replica" in out

        _wait("the old primary a replica of the new one", redis_is_replica, 90.0, project)
    finally:
        compose(project, *HA, "down", "--volumes", "--remove-orphans", "--timeout", "5", check=False)
