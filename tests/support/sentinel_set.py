"""A Redis primary, its replica and three sentinels, as real redis-server processes on free
loopback ports: for the failover soak (bench/chaos_failover.py) and the tests of Sentinel URLs.

The sentinels watch the service ``SERVICE`` with a quorum of 2 and call the primary down after
``down_after_ms``. ``kill_primary`` SIGKILLs whichever server is the primary now;
``restart`` starts a killed server again on its port, empty (nothing is persisted: the replica is
the copy that survives), and the sentinels turn it into a replica of the new primary.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.redis_server import RedisServer
from toolq.local import free_port

SERVICE = "toolq"


class SentinelProcess:
    def __init__(self, primary_port: int, down_after_ms: int):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="toolq-sentinel-")
        conf = Path(self.dir) / "sentinel.conf"  # the sentinel rewrites it: a file of its own
        conf.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    f"dir {self.dir}",
                    f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
                    f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}",
                    f"sentinel failover-timeout {SERVICE} {max(3000, 3 * down_after_ms)}",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    "",
                ]
            )
        )
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        # redis-server --sentinel is redis-sentinel: the same binary in Sentinel mode
        self.proc = subprocess.Popen(
            [exe, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1, socket_connect_timeout=1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelSet:
    def __init__(self, *, down_after_ms: int = 1000):
        self.down_after_ms = down_after_ms
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> SentinelSet:
        primary = RedisServer()
        primary.start()
        replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(primary.port)))
        replica.start()
        self.servers = [primary, replica]
        self.wait_replicas(primary.port, 1)
        self.sentinels = [SentinelProcess(primary.port, self.down_after_ms) for _ in range(3)]
        deadline = time.monotonic() + 20
        while not self._sentinels_ready():
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not all see the primary, its replica and each other")
            time.sleep(0.1)
        return self

    def _sentinels_ready(self) -> bool:
        for s in self.sentinels:
            try:
                info = s.client().execute_command("SENTINEL", "MASTER", SERVICE)
            except redis.RedisError:
                return False
            d = dict(zip(info[::2], info[1::2], strict=True)) if isinstance(info, list) else info
            d = {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}
            if int(d.get("num-slaves", 0)) < 1 or int(d.get("num-other-sentinels", 0)) < 2:
                return False
        return True

    def primary_port(self) -> int | None:
        """The primary's port as the sentinels report it (the first that answers)."""
        for s in self.sentinels:
            try:
                addr = s.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            except redis.RedisError:
                continue
            if addr:
                return int(addr[1])
        return None

    def wait_agreed(self, port: int, timeout: float = 30.0) -> None:
        """Wait until every sentinel names ``port`` the primary. A sentinel still behind would
        send a client to an old primary that came back empty, before the others make it a replica."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            named = set()
            for s in self.sentinels:
                try:
                    addr = s.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                    named.add(int(addr[1]) if addr else None)
                except redis.RedisError:
                    named.add(None)
            if named == {port}:
                return
            time.sleep(0.05)
        raise TimeoutError(f"the sentinels do not all name port {port} the primary after {timeout} s")

    def replica(self) -> RedisServer:
        """A server that is not the primary now."""
        primary = self.primary_port()
        return next(s for s in self.servers if s.port != primary and s.proc is not None)

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def kill_primary(self) -> RedisServer:
        port = self.primary_port()
        assert port is not None, "no sentinel answers"
        victim = self.server(port)
        victim.kill()
        return victim

    def wait_promoted(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until the sentinels name a primary other than ``old_port``; returns its port."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port is not None and port != old_port:
                return port
            time.sleep(0.05)
        raise TimeoutError(f"no replica was promoted within {timeout} s")

    def restart(self, server: RedisServer) -> None:
        """Start a killed server again on its port, as a plain server: the sentinels make it a
        replica of the primary of now."""
        server.extra = ()
        server.start()

    def wait_replicas(self, primary_port: int, n: int, timeout: float = 30.0) -> None:
        """Wait until the primary on ``primary_port`` has ``n`` replicas in sync."""
        r = redis.Redis(host="127.0.0.1", port=primary_port, socket_timeout=2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = r.info("replication")
                online = sum(
                    1
                    for k, v in info.items()
                    if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
                )
                if info.get("role") == "master" and online >= n:
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"the primary on port {primary_port} has not {n} replica(s) in sync after {timeout} s")

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for srv in self.servers:
            srv.remove()
