"""The images a toolq stack in containers runs, and what to do when one is not in the local engine.

Nothing is pulled or built from here: a test that starts containers must not spend minutes in a
registry or a compiler, and machines without a registry (CI) cannot pull at all. A missing image
is named in one line with the command that provides it.
"""

from __future__ import annotations

from typing import Any

# The same names as docker-compose.yml; scripts/docker-standins.sh builds REDIS_IMAGE where it
# cannot be pulled (tests/unit/test_deploy.py checks that the three agree).
REDIS_IMAGE = "redis:7.4-alpine"
GATEWAY_IMAGE = "toolq-gateway"
WORKER_IMAGE = "toolq-worker-cpu"

HOW_TO_GET = {
    REDIS_IMAGE: f"docker pull {REDIS_IMAGE}, or, with no registry, bash scripts/docker-standins.sh",
    GATEWAY_IMAGE: "docker compose build gateway, in a toolq checkout",
    WORKER_IMAGE: "docker compose build worker-cpu, in a toolq checkout",
}


class ImageMissing(RuntimeError):
    """An image the stack needs is not in the local Docker engine."""


def require_images(client: Any, *names: str) -> None:
    """Raise ImageMissing naming the first of ``names`` the engine behind ``client`` lacks."""
    import docker.errors

    for name in names:
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            how = HOW_TO_GET.get(name, f"docker pull {name}")
            raise ImageMissing(f"the Docker image {name} is not in the local engine; get it with: {how}") from None
