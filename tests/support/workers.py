"""Start real worker processes for tests: `python -m toolq worker`, scripted or real engine."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from typing import Any

from store import keys
from tests.support.processes import REPO, ToolqProcess

__all__ = ["REPO", "WorkerProcess", "wait_free", "write_rules"]


def write_rules(rules: list[tuple[str, str]], token_delay_s: float = 0.0) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, prefix="toolq-rules-")
    json.dump({"rules": [{"when": w, "reply": r} for w, r in rules], "token_delay_s": token_delay_s}, f)
    f.close()
    return f.name


def wait_free(r: Any, model: str, worker_id: str, timeout: float = 10) -> None:
    """Until the worker's load shows a free slot (``r``: a sync redis client). A job posted while
    the load still says full (a write that came before the worker counted its job as finishing:
    worker/load.py) is placed elsewhere ('fallback_full'), which is right for that moment but not
    what a test of a free worker's placement means."""
    deadline = time.monotonic() + timeout
    while True:
        load = r.hget(keys.worker_load(model), worker_id)
        if load is not None and int(load.split()[0]) < int(load.split()[1]):
            return
        assert time.monotonic() < deadline, f"worker {worker_id} stayed full: {load!r}"
        time.sleep(0.02)


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
