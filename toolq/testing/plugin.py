"""The pytest plugin (entry point ``pytest11``: ``toolq``): a toolq stack in containers as fixtures.

- ``toolq_rules`` (module scope): the scripted model's rules; None (the default) runs the bundled
  SmolLM2. Override it in a test module or conftest to script the model.
- ``toolq_stack`` (module scope): a started ``ToolqStack`` (Redis, gateway, worker), removed after
  the module.
- ``toolq_client``: a ``toolq.SyncClient`` on that stack's gateway.

Without a Docker engine these fixtures skip the test with the reason; under ``CI=true`` they fail
it instead, so that CI never passes by skipping.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toolq.client import SyncClient
from toolq.testing.engine import docker_unavailable, in_ci
from toolq.testing.images import ImageMissing
from toolq.testing.stack import Rule, ToolqStack


def require_docker() -> None:
    """Skip the calling test when no Docker engine answers (fail it under CI=true)."""
    reason = docker_unavailable()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI=true and this test needs Docker: {reason}", pytrace=False)
    pytest.skip(f"needs Docker: {reason}")


@pytest.fixture(scope="module")
def toolq_rules() -> list[Rule] | None:
    return None


@pytest.fixture(scope="module")
def toolq_stack(toolq_rules: list[Rule] | None) -> Iterator[ToolqStack]:
    require_docker()
    try:
        stack = ToolqStack(toolq_rules).start()
    except ImageMissing as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def toolq_client(toolq_stack: ToolqStack) -> Iterator[SyncClient]:
    client = toolq_stack.sync_client()
    try:
        yield client
    finally:
        client.close()
