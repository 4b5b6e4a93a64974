"""Start the test MCP server (tests/support/mcp_server.py): its stdio config, or an HTTP process."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from typing import Any

from tests.support.workers import REPO


def stdio_server(name: str = "t", *extra: str, **fields: Any) -> dict[str, Any]:
    """A server entry for settings: the test server spawned over stdio."""
    env = {"PYTHONPATH": str(REPO), **fields.pop("env", {})}
    cmd = [sys.executable, "-m", "tests.support.mcp_server", *extra]
    return {"name": name, "command": cmd, "env": env, "cwd": str(REPO), **fields}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The test server over streamable HTTP, in its own process."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> HttpServer:
        args = [sys.executable, "-m", "tests.support.mcp_server", "--http", str(self.port)]
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MCP HTTP server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"MCP HTTP server not listening on {self.port} after {timeout}s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
