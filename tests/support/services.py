"""Start real tool service processes for tests and benchmarks: `python -m toolq tools serve`."""

from __future__ import annotations

import sys

from store import keys
from tests.support.processes import REPO, ToolqProcess

__all__ = ["REPO", "ServiceProcess"]


class ServiceProcess(ToolqProcess):
    def __init__(
        self,
        redis_url: str,
        modules: tuple[str, ...] = ("tests.support.service_tools",),
        *,
        lease_ms: int = 1000,
        concurrency: int = 16,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ):
        self.redis_url = redis_url
        args = [sys.executable, "-m", "toolq", "tools", "serve", *modules, "--redis-url", redis_url]
        args += ["--lease-ms", str(lease_ms), "--concurrency", str(concurrency), *extra]
        super().__init__(args, what="tool service", log_name="service", env=env)
        self.instance_id: str | None = None

    def wait_ready(self, timeout: float = 30.0) -> ServiceProcess:
        self.instance_id = self.wait_registered(self.redis_url, keys.SERVICES, keys.service, timeout)
        return self
