"""A Redis server in a container, for tests: the test suite's shared Redis and a stack's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from toolq.testing.engine import owner_labels, prepare_testcontainers, sweep_orphans
from toolq.testing.images import REDIS_IMAGE, require_images

READY_LINE = "Ready to accept connections"


def redis_container(image: str = REDIS_IMAGE, network: Any = None, alias: str = "redis") -> Any:
    """A testcontainers DockerContainer for Redis, not started; on ``network`` as ``alias`` if given."""
    prepare_testcontainers()
    from testcontainers.core.container import DockerContainer

    container = (
        DockerContainer(image)
        .with_command(["redis-server", "--save", "", "--appendonly", "no", "--databases", "256"])
        .with_exposed_ports(6379)
        .with_kwargs(labels=owner_labels())
    )
    if network is not None:
        container = container.with_network(network).with_network_aliases(alias)
    return container


def wait_ready(container: Any, timeout: float = 30) -> None:
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    strategy = LogMessageWaitStrategy(READY_LINE).with_startup_timeout(int(timeout)).with_poll_interval(0.1)
    strategy.wait_until_ready(container)


def host_url(container: Any) -> str:
    """The URL at which this process reaches the container's Redis (no database number)."""
    return f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}"


@contextmanager
def running_redis(image: str = REDIS_IMAGE) -> Iterator[str]:
    """Start Redis in a container, yield its URL, remove the container on exit.

    Raises ImageMissing (one line: the image and how to get it) before starting anything when the
    engine lacks the image.
    """
    import docker

    client = docker.from_env()
    sweep_orphans(client)
    require_images(client, image)
    with redis_container(image) as container:
        wait_ready(container)
        yield host_url(container)
