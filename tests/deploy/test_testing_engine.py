"""toolq.testing's hold on the Docker engine: a missing image is one line that says what to run,
and containers a dead test process left behind are removed by the next one."""

from __future__ import annotations

import os
import subprocess
import sys

import docker
import pytest

from toolq.testing.engine import OWNER_LABEL, sweep_orphans
from toolq.testing.images import REDIS_IMAGE, ImageMissing
from toolq.testing.plugin import require_docker
from toolq.testing.redis import running_redis


@pytest.fixture
def engine():
    require_docker()
    client = docker.from_env()
    yield client
    client.close()


def test_a_missing_image_is_named_with_the_command_that_provides_it(engine):
    with pytest.raises(ImageMissing) as e:
        with running_redis("toolq-no-such-image:0"):
            pass
    assert str(e.value) == (
        "the Docker image toolq-no-such-image:0 is not in the local engine; get it with: docker pull toolq-no-such-image:0"
    )


def test_containers_of_a_dead_test_process_are_swept(engine):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = engine.containers.create(REDIS_IMAGE, labels={OWNER_LABEL: dead.stdout.strip()})
    mine = engine.containers.create(REDIS_IMAGE, labels={OWNER_LABEL: str(os.getpid())})
    try:
        assert sweep_orphans(engine) >= 1
        ids = {c.id for c in engine.containers.list(all=True, filters={"label": OWNER_LABEL})}
        assert left.id not in ids and mine.id in ids
    finally:
        mine.remove(force=True)
