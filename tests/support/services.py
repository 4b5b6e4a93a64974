"""Start real tool service processes for tests and benchmarks: `python -m toolq tools serve`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from toolq import keys

REPO = Path(__file__).resolve().parents[2]


class ServiceProcess:
    def __init__(
        self,
        redis_url: str,
        modules: tuple[str, ...] = ("tests.support.service_tools",),
        *,
        lease_ms: int = 1000,
        concurrency: int = 16,
        extra: tuple[str, ...] = (),
    ):
        self.redis_url = redis_url
        args = [sys.executable, "-m", "toolq", "tools", "serve", *modules, "--redis-url", redis_url]
        args += ["--lease-ms", str(lease_ms), "--concurrency", str(concurrency), *extra]
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False, prefix="toolq-service-")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        self.instance_id: str | None = None

    def wait_ready(self, timeout: float = 30.0) -> ServiceProcess:
        r = redis.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tool service exited with {self.proc.returncode}:\n{self.output()}")
            for iid in r.smembers(keys.SERVICES):
                h = r.hgetall(keys.service(iid.decode()))
                if h and int(h[b"pid"]) == self.proc.pid:
                    self.instance_id = iid.decode()
                    return self
            time.sleep(0.05)
        raise TimeoutError(f"tool service not ready after {timeout}s:\n{self.output()}")

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
