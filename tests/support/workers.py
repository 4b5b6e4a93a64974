"""Start real worker processes for tests: `python -m toolq worker`, scripted or real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from toolq import keys

REPO = Path(__file__).resolve().parents[2]


def write_rules(rules: list[tuple[str, str]], token_delay_s: float = 0.0) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, prefix="toolq-rules-")
    json.dump({"rules": [{"when": w, "reply": r} for w, r in rules], "token_delay_s": token_delay_s}, f)
    f.close()
    return f.name


class WorkerProcess:
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
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False, prefix="toolq-worker-")
        penv = {
            **os.environ,
            "TOOLQ_REDIS_URL": redis_url,
            "PYTHONPATH": str(REPO),
            "TOOLQ_LEASE_MS": "1500",
            "TOOLQ_HEARTBEAT_MS": "250",
            **(env or {}),
        }
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=penv, cwd=REPO)
        self.worker_id: str | None = None

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        r = redis.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.output()}")
            for wid in r.smembers(keys.WORKERS):
                h = r.hgetall(keys.worker(wid.decode()))
                if h and int(h[b"pid"]) == self.proc.pid:
                    self.worker_id = wid.decode()
                    return self
            time.sleep(0.05)
        raise TimeoutError(f"worker not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
