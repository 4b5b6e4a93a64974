"""Connections to the primary a Sentinel names, that ask the sentinels again before every try.

redis-py's Sentinel-managed connection asks the sentinels for the primary once, then connects to
that address through the connection's own retry: with the store's retry (about 10 s of tries,
store/arq_link.py ``retrying_pool``) a connect begun just after the primary died keeps knocking
at its address. When that machine comes back, empty and for a moment a primary of its own until
the sentinels make it a replica, the connection lands on it. The failover soak
(bench/chaos_failover.py) caught a worker doing that: arq read its jobs' payloads there, found
none, called them expired and took them off the real primary's queue, and a job that had not
started yet was lost.

Here each try connects once, to the address the sentinels name at that moment, and the retry
around the whole (redis-py's own ``connect``, with the same backoff) asks them again before the
next. The sync classes serve the CLI and health checks; the async ones every service.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncManaged
from redis.asyncio.sentinel import SentinelManagedSSLConnection as AsyncManagedSSL
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import SentinelManagedConnection as Managed
from redis.sentinel import SentinelManagedSSLConnection as ManagedSSL

__all__ = ["async_connection_class", "sync_connection_class"]


class _AsyncOneTry(AsyncManaged):
    async def connect_to(self, address: Any) -> None:
        kept, self.retry = self.retry, AsyncRetry(NoBackoff(), 0)
        try:
            await super().connect_to(address)  # type: ignore[no-untyped-call]  # redis-py: unannotated
        finally:
            self.retry = kept


class _AsyncOneTrySSL(_AsyncOneTry, AsyncManagedSSL):
    pass


class _OneTry(Managed):
    def connect_to(self, address: Any) -> None:
        kept, self.retry = self.retry, Retry(NoBackoff(), 0)
        try:
            super().connect_to(address)  # type: ignore[no-untyped-call]  # redis-py: unannotated
        finally:
            self.retry = kept


class _OneTrySSL(_OneTry, ManagedSSL):
    pass


def async_connection_class(tls: bool) -> type:
    return _AsyncOneTrySSL if tls else _AsyncOneTry


def sync_connection_class(tls: bool) -> type:
    return _OneTrySSL if tls else _OneTry
