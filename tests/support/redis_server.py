"""A redis-server of our own on a free port: for tests that stop and restart Redis, and for the
benchmarks, which import it from here (never from the tests' conftest)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time

from toolq.local import free_port, redis_answers


class RedisServer:
    """A redis-server we started ourselves: tests may stop and restart it.

    With ``appendfsync`` ("always" or "everysec") the server keeps an append-only file in ``dir``,
    so a restart on the same port finds its data again; without it nothing is persisted.
    """

    def __init__(self, port: int | None = None, *, appendfsync: str | None = None, extra: tuple[str, ...] = ()):
        if appendfsync not in (None, "always", "everysec"):
            raise ValueError(f"appendfsync must be 'always' or 'everysec', not {appendfsync!r}")
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="toolq-redis-")
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen | None = None
        self.extra = extra  # more redis-server options, e.g. ("--replicaof", "127.0.0.1", "6379")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *self._aof_args(),
                "--dir",
                self.dir,
                "--databases",
                "256",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not redis_answers(self.url, 0.2):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def _aof_args(self) -> list[str]:
        if self.appendfsync is None:
            return ["--appendonly", "no"]
        return ["--appendonly", "yes", "--appendfsync", self.appendfsync]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed that was not flushed already."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
