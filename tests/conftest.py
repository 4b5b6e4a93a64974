"""Shared fixtures: a real Redis server for every test that needs one.

Where the server comes from, in order: ``REDIS_URL`` (or ``TOOLQ_TEST_REDIS_URL``), else a
container through testcontainers when a Docker engine answers, else a ``redis-server`` spawned on
a free port for the session. Each test gets its own logical database, flushed before use, so
tests are isolated from each other and from anything else on the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_server import RedisServer
from toolq.local import redis_answers


def _docker_answers() -> bool:
    try:
        import docker  # installed with testcontainers

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def redis_base_url() -> Iterator[str]:
    url = os.environ.get("TOOLQ_TEST_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:
        if not redis_answers(url):
            pytest.fail(f"REDIS_URL={url} does not answer PING")
        yield url.rsplit("/", 1)[0] if url.count("/") > 2 else url
        return
    if _docker_answers():
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        with DockerContainer("redis:7-alpine").with_exposed_ports(6379) as c:
            wait_for_logs(c, "Ready to accept connections", timeout=30)
            yield f"redis://{c.get_container_host_ip()}:{c.get_exposed_port(6379)}"
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


_db_counter = iter(range(1, 10_000))


@pytest.fixture
def redis_url(redis_base_url: str) -> str:
    """A URL to a flushed logical database of its own for this test."""
    db = next(_db_counter) % 16 or 1
    url = f"{redis_base_url}/{db}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server this test owns outright, for tests that stop and restart Redis."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
