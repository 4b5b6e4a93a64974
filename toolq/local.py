"""Helpers for starting services on this machine: the demo, the tests and the benchmarks."""

from __future__ import annotations

import socket

from store import redis_urls


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # an AF_INET address is (host, port)
        return port


def redis_answers(url: str, timeout: float = 0.5) -> bool:
    return redis_urls.answers(url, timeout)
