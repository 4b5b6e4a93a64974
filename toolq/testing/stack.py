"""A toolq stack in containers for a test: Redis, the gateway and one worker on a network of their own.

The worker runs the bundled SmolLM2 model, or, given rules, the scripted engine
(`toolq worker --engine scripted`): each rule is a regular expression searched in the prompt and
the reply the "model" writes when it matches, tool calls included. The stack hands back the
gateway's URL, an OpenAI base URL and ready clients; the protocol is the real one end to end.

This module only drives containers (images from docker-compose.yml, toolq/testing/images.py):
it imports neither the worker nor the gateway.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from toolq.client import Client, SyncClient
from toolq.testing.engine import owner_labels, prepare_testcontainers, sweep_orphans
from toolq.testing.images import GATEWAY_IMAGE, REDIS_IMAGE, WORKER_IMAGE, require_images
from toolq.testing.redis import host_url, redis_container, wait_ready

GATEWAY_PORT = 8000
SCRIPT_PATH = "/tmp/toolq-script.json"  # inside the worker container


@dataclass(frozen=True)
class Rule:
    """When ``when`` (a regular expression) is found in the prompt, the model replies ``reply``."""

    when: str
    reply: str


class StackFailed(RuntimeError):
    """A container of the stack exited or never became ready; the message carries its last log lines."""


class ToolqStack:
    """Start with ``with ToolqStack(...) as stack:`` (or ``start()`` / ``stop()``).

    ``rules``: the scripted engine's rules; None runs the bundled model. ``model``: the model name
    jobs name (default "scripted" with rules, else the bundled file's stem). ``api_key``: the
    gateway's one key (tenant "tests"); None runs it open.
    """

    def __init__(
        self,
        rules: Sequence[Rule] | None = None,
        *,
        model: str | None = None,
        api_key: str | None = "toolq-test-key",
        token_delay_s: float = 0.0,
        startup_timeout_s: float = 120.0,
        redis_image: str = REDIS_IMAGE,
        gateway_image: str = GATEWAY_IMAGE,
        worker_image: str = WORKER_IMAGE,
    ):
        self.rules = list(rules) if rules is not None else None
        self.model = model or ("scripted" if self.rules is not None else "")
        self.api_key = api_key
        self.token_delay_s = token_delay_s
        self.startup_timeout_s = startup_timeout_s
        self.images = (redis_image, gateway_image, worker_image)
        self._network: Any = None
        self._containers: list[Any] = []
        self.url = ""
        self.redis_url = ""

    # ------------------------------------------------------------------ what a test uses

    @property
    def openai_base_url(self) -> str:
        """For ``openai.OpenAI(base_url=..., api_key=stack.api_key)``."""
        return f"{self.url}/v1"

    def client(self) -> Client:
        """An async SDK client on the gateway (HTTP mode), with the stack's key."""
        return Client(self.url, self.api_key)

    def sync_client(self) -> SyncClient:
        return SyncClient(self.url, self.api_key)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ToolqStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> ToolqStack:
        import docker

        prepare_testcontainers()
        from testcontainers.core.network import Network

        client = docker.from_env()
        sweep_orphans(client)
        require_images(client, *self.images)
        try:
            self._network = Network(docker_network_kw={"labels": owner_labels()}).create()
            redis = self._run(redis_container(self.images[0], self._network, "redis"))
            wait_ready(redis)
            self.redis_url = host_url(redis)
            gateway = self._run(self._gateway())
            self.url = f"http://{gateway.get_container_host_ip()}:{gateway.get_exposed_port(GATEWAY_PORT)}"
            self._run(self._worker())
            self._wait_until_served()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for container in reversed(self._containers):
            container.stop()
        self._containers.clear()
        if self._network is not None:
            self._network.remove()
            self._network = None

    # ------------------------------------------------------------------ the containers

    def _run(self, container: Any) -> Any:
        self._containers.append(container)  # before start: a failed start is still removed
        return container.start()

    def _service(self, image: str) -> Any:
        from testcontainers.core.container import DockerContainer

        return (
            DockerContainer(image)
            .with_network(self._network)
            .with_env("TOOLQ_REDIS_URL", "redis://redis:6379/0")
            .with_kwargs(labels=owner_labels())
        )

    def _gateway(self) -> Any:
        gateway = (
            self._service(self.images[1])
            .with_command(["toolq", "gateway", "--host", "0.0.0.0", "--port", str(GATEWAY_PORT)])
            .with_exposed_ports(GATEWAY_PORT)
        )
        if self.api_key is not None:
            gateway = gateway.with_env("TOOLQ_API_KEYS", f"{self.api_key}:tests")
        return gateway

    def _worker(self) -> Any:
        worker = self._service(self.images[2])
        if self.model:
            worker = worker.with_env("TOOLQ_MODEL_NAME", self.model)
        if self.rules is None:
            return worker.with_command(["toolq", "worker"])
        script = {
            "rules": [{"when": r.when, "reply": r.reply} for r in self.rules],
            "token_delay_s": self.token_delay_s,
        }
        # The rules travel in the environment, not a bind mount, so that a remote engine works too.
        return worker.with_env("TOOLQ_TESTING_SCRIPT", json.dumps(script)).with_command(
            [
                "sh",
                "-c",
                f'printf %s "$TOOLQ_TESTING_SCRIPT" > {SCRIPT_PATH} '
                f"&& exec toolq worker --engine scripted --script {SCRIPT_PATH}",
            ]
        )

    def _wait_until_served(self) -> None:
        """Until the gateway answers and lists a live worker of the model (the one model, if unnamed)."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            self._check_running()
            try:
                models = httpx.get(f"{self.url}/v1/models", headers=headers, timeout=2).json()["data"]
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                models = []
            live = [m["id"] for m in models if m.get("workers")]
            if live and (not self.model or self.model in live):
                self.model = self.model or live[0]
                return
            time.sleep(0.2)
        raise StackFailed(f"no worker was serving after {self.startup_timeout_s:.0f} s\n{self._logs()}")

    def _check_running(self) -> None:
        for container in self._containers:
            inner = container.get_wrapped_container()
            inner.reload()
            if inner.status in ("exited", "dead"):
                raise StackFailed(f"the container of {container.image} exited\n{self._logs()}")

    def _logs(self) -> str:
        out = []
        for container in self._containers:
            stdout, stderr = container.get_logs()
            tail = (stdout + stderr).decode(errors="replace").strip().splitlines()[-15:]
            out.append(f"--- {container.image}\n" + "\n".join(tail))
        return "\n".join(out)
