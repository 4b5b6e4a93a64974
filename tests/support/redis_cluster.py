"""A real Redis Cluster of three primaries on loopback ports: ``redis-server --cluster-enabled yes``
three times, joined by ``redis-cli --cluster create``. For the tests of the scripts that are
cluster-safe (docs/architecture/redis.md, "Past one Redis")."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import redis

from toolq.local import free_port


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free as well."""
    for _ in range(200):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisCluster:
    """Three primaries, no replicas, every slot assigned; ``url`` names one of them (redis-py's
    RedisCluster finds the rest)."""

    def __init__(self, primaries: int = 3):
        self.n = primaries
        self.ports: list[int] = []
        self.dir = tempfile.mkdtemp(prefix="toolq-cluster-")
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self) -> RedisCluster:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed (apt-get install redis-server)")
        try:
            for _ in range(self.n):
                port = _free_cluster_port()
                self.ports.append(port)
                self.procs.append(
                    subprocess.Popen(
                        [
                            server,
                            "--port", str(port),
                            "--bind", "127.0.0.1",
                            "--cluster-enabled", "yes",
                            "--cluster-config-file", f"nodes-{port}.conf",
                            "--cluster-node-timeout", "5000",
                            "--save", "",
                            "--appendonly", "no",
                            "--dir", self.dir,
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )  # fmt: skip
            for port in self.ports:
                self._wait(lambda p=port: redis.Redis(port=p, socket_connect_timeout=0.2).ping(), f"node {port}")
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports), "--cluster-replicas", "0",
                 "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )  # fmt: skip
            for port in self.ports:
                self._wait(lambda p=port: self._state_ok(p), f"cluster_state:ok on {port}")
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _state_ok(port: int) -> bool:
        info = redis.Redis(port=port).execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def _wait(self, check: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():  # type: ignore[operator]
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis cluster: no {what} after {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)
