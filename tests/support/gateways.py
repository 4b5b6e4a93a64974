"""Real gateway processes for tests and benchmarks (`python -m toolq gateway` on a free port, its own
environment, e.g. OTEL_* variables, and its own CPU), ready once its /readyz answers 200 (Redis
reachable and a live worker registered)."""

from __future__ import annotations

import sys
import time

import httpx

from tests.support.processes import ToolqProcess
from toolq.local import free_port

__all__ = ["GatewayProcess"]


class GatewayProcess(ToolqProcess):
    def __init__(self, redis_url: str, *, env: dict[str, str] | None = None, log_level: str = "warning"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        penv = {
            "TOOLQ_LOG_LEVEL": log_level,
            "TOOLQ_FLEET_CACHE_S": "1",
            "TOOLQ_MAX_QUEUE_DEPTH": "100000",
            "TOOLQ_API_KEYS": "",
            **(env or {}),
        }
        args = [sys.executable, "-m", "toolq", "gateway", "--port", str(self.port), "--redis", redis_url]
        super().__init__(args, what="gateway", log_name="gateway", env=penv)

    def wait_ready(self, timeout: float = 60.0) -> GatewayProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"gateway not ready after {timeout}s:\n{self.output()}")
