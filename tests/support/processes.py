"""A toolq process started for a test or a benchmark: its output in a temporary log, ready once
it has registered itself in Redis, stopped with SIGTERM (then SIGKILL) or killed outright."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from store import redis_urls

REPO = Path(__file__).resolve().parents[2]


class ToolqProcess:
    def __init__(self, args: list[str], *, what: str, log_name: str, env: dict[str, str] | None = None):
        self.what = what  # names it in messages
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False, prefix=f"toolq-{log_name}-")
        penv = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=penv, cwd=REPO)

    def wait_registered(self, redis_url: str, members: str, entry: Callable[[str], str], timeout: float) -> str:
        """The id this process registered under: a member of the set ``members`` whose hash
        (``entry(id)``) carries this process's pid."""
        r = redis_urls.sync_client(redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.what} exited with {self.proc.returncode}:\n{self.output()}")
            for member in r.smembers(members):
                h = r.hgetall(entry(member.decode()))
                if h and int(h[b"pid"]) == self.proc.pid:
                    return member.decode()
            time.sleep(0.05)
        raise TimeoutError(f"{self.what} not ready after {timeout}s:\n{self.output()}")

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
