"""Start real worker processes for tests: `python -m toolq worker`, scripted or real engine."""

from __future__ import annotations

import json
import sys
import tempfile

from store import keys
from tests.support.processes import REPO, ToolqProcess

__all__ = ["REPO", "WorkerProcess", "write_rules"]


def write_rules(rules: list[tuple[str, str]], token_delay_s: float = 0.0) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, prefix="toolq-rules-")
    json.dump({"rules": [{"when": w, "reply": r} for w, r in rules], "token_delay_s": token_delay_s}, f)
    f.close()
    return f.name


class WorkerProcess(ToolqProcess):
    def __init__(
        self,
        redis_url: str,
        *,
        script: str | None = None,
        name: str = "scripted",
        tools: tuple[str, ...] = ("worker.demo_tools", "tests.support.tools"),
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ):
        self.redis_url = redis_url
        args = [sys.executable, "-m", "toolq", "worker", "--redis", redis_url, *extra]
        if script:
            args += ["--engine", "scripted", "--script", script, "--name", name]
        for t in tools:
            args += ["--tools", t]
        penv = {"TOOLQ_REDIS_URL": redis_url, "TOOLQ_LEASE_MS": "1500", "TOOLQ_HEARTBEAT_MS": "250", **(env or {})}
        super().__init__(args, what="worker", log_name="worker", env=penv)
        self.worker_id: str | None = None

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        self.worker_id = self.wait_registered(self.redis_url, keys.WORKERS, keys.worker, timeout)
        return self
