"""Shared fixtures: a real Redis server for every test that needs one.

Where the server comes from, in order: ``REDIS_URL`` (or ``TOOLQ_TEST_REDIS_URL``), else a
container through testcontainers when a Docker engine answers (toolq/testing/redis.py: the image
of docker-compose.yml, Ryuk off, the container removed at the end of the session), else a
``redis-server`` spawned on a free port for the session. Under ``CI=true`` the engine must answer.
When it answers but lacks the image, the run stops at once with one line that names the image and
how to get it. Each test gets its own logical database, flushed before use, so tests are isolated
from each other and from anything else on the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import redis

from tests.support.redis_server import RedisServer
from toolq.local import redis_answers
from toolq.testing.engine import docker_unavailable, in_ci
from toolq.testing.images import ImageMissing
from toolq.testing.redis import running_redis


@pytest.fixture(scope="session")
def redis_base_url() -> Iterator[str]:
    url = os.environ.get("TOOLQ_TEST_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:
        if not redis_answers(url):
            pytest.fail(f"REDIS_URL={url} does not answer PING")
        yield url.rsplit("/", 1)[0] if url.count("/") > 2 else url
        return
    no_docker = docker_unavailable()
    if no_docker is None:
        with ExitStack() as stack:
            try:
                url = stack.enter_context(running_redis())
            except ImageMissing as e:
                pytest.exit(f"the tests' Redis: {e}", returncode=1)  # one line, not an error per test
            yield url
        return
    if in_ci():
        pytest.exit(f"CI=true: the tests' Redis comes from testcontainers, but {no_docker}", returncode=1)
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
