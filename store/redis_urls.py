"""Every Redis URL toolq takes, turned into a client in one place: plain Redis or Sentinel.

``redis://``, ``rediss://`` and ``unix://`` go to redis-py's own parser. A Sentinel URL names the
sentinels and the monitored service, and the client asks the sentinels for the current primary:

    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB][?sentinel_password=...]
    rediss+sentinel://...   the same over TLS, to the sentinels and to the primary

The user and password are the data nodes'; ``sentinel_username`` / ``sentinel_password`` in the
query are the sentinels' own (sentinels often run without a password). A port left out is 26379.
Any other scheme is refused with a message that lists the ones understood.

Following a failover is redis-py's: its Sentinel connection pool asks the sentinels for the
primary on every new connection, and a connection that meets ``READONLY`` (the old primary, now a
replica) is dropped with a ConnectionError, which the pool's retry turns into a new connection to
the new primary. Each try at a connection asks the sentinels afresh
(store/sentinel_connections.py), so none outlasts a failover at the old primary's address. The
async pool is what ``store.arq_link.connect`` gives arq, so arq's own commands follow too
(arq's ``RedisSettings(sentinel=True)`` builds the same pool, through ``Sentinel.master_for``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.sentinel import Sentinel, SentinelConnectionPool

from store import sentinel_connections

__all__ = [
    "BadRedisURL",
    "SentinelURL",
    "async_client",
    "async_pool",
    "check",
    "describe",
    "parse_sentinel",
    "sync_client",
]

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}  # scheme -> TLS
SENTINEL_PORT = 26379
_QUERY = ("sentinel_username", "sentinel_password")
_KNOWN = ", ".join(f"{s}://" for s in (*PLAIN_SCHEMES, *SENTINEL_SCHEMES))


class BadRedisURL(ValueError):
    """A Redis URL toolq cannot use; the message says what is wrong and what is expected."""

    def __init__(self, url: str, why: str):
        super().__init__(f"bad Redis URL {url!r}: {why}")


@dataclass(frozen=True)
class SentinelURL:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def node_kwargs(self) -> dict[str, Any]:
        """What a connection to the primary takes."""
        kw: dict[str, Any] = {"db": self.db}
        if self.username:
            kw["username"] = self.username
        if self.password:
            kw["password"] = self.password
        if self.tls:
            kw["ssl"] = True
        return kw

    def sentinel_kwargs(self, socket_kw: dict[str, Any]) -> dict[str, Any]:
        """What a connection to a sentinel takes: the socket settings, TLS and its own login."""
        kw = dict(socket_kw)
        if self.sentinel_username:
            kw["username"] = self.sentinel_username
        if self.sentinel_password:
            kw["password"] = self.sentinel_password
        if self.tls:
            kw["ssl"] = True
        return kw


def _scheme(url: str) -> str:
    if "://" not in url:
        raise BadRedisURL(url, f"a Redis URL starts with one of {_KNOWN}")
    return url.split("://", 1)[0].lower()


def _host_port(item: str, url: str) -> tuple[str, int]:
    item = item.strip()
    if not item:
        raise BadRedisURL(url, "an empty sentinel address (HOST:PORT, comma-separated)")
    if item.startswith("["):  # [v6]:port
        host, _, rest = item[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise BadRedisURL(url, f"bad sentinel address {item!r}")
    else:
        host, _, port_text = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise BadRedisURL(url, f"sentinel address {item!r} has no host")
    if not port_text:
        return host, SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadRedisURL(url, f"sentinel address {item!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def parse_sentinel(url: str) -> SentinelURL:
    """Parse a ``redis+sentinel://`` or ``rediss+sentinel://`` URL; raises BadRedisURL saying why not."""
    scheme = _scheme(url)
    if scheme not in SENTINEL_SCHEMES:
        raise BadRedisURL(url, "not a Sentinel URL (redis+sentinel:// or rediss+sentinel://)")
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, _, pw = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(pw) or None
    sentinels = tuple(_host_port(h, url) for h in hosts.split(","))
    path = parts.path.split("/")
    if len(path) < 2 or not path[1]:
        raise BadRedisURL(url, "a Sentinel URL names its service: redis+sentinel://HOST:PORT/SERVICE[/DB]")
    service, rest = unquote(path[1]), [p for p in path[2:] if p != ""]
    if len(rest) > 1:
        raise BadRedisURL(url, f"a Sentinel URL's path is /SERVICE or /SERVICE/DB, not {parts.path!r}")
    db = 0
    if rest:
        if not rest[0].isdigit():
            raise BadRedisURL(url, f"the database must be a number, not {rest[0]!r}")
        db = int(rest[0])
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_QUERY))
    if unknown:
        raise BadRedisURL(url, f"unknown option(s) {', '.join(unknown)}; a Sentinel URL takes {', '.join(_QUERY)}")
    return SentinelURL(
        sentinels=sentinels,
        service=service,
        db=db,
        tls=SENTINEL_SCHEMES[scheme],
        username=username,
        password=password,
        sentinel_username=query.get("sentinel_username", [None])[-1] or None,
        sentinel_password=query.get("sentinel_password", [None])[-1] or None,
    )


def check(url: str) -> None:
    """Raise BadRedisURL unless toolq can use the URL (it parses only; nothing is connected)."""
    scheme = _scheme(url)
    if scheme in SENTINEL_SCHEMES:
        parse_sentinel(url)
    elif scheme in PLAIN_SCHEMES:
        try:
            redis.ConnectionPool.from_url(url)
        except ValueError as e:
            raise BadRedisURL(url, str(e)) from None
    else:
        raise BadRedisURL(url, f"unknown Redis URL scheme {scheme + '://'!r}; toolq understands {_KNOWN}")


def describe(url: str) -> str:
    """The URL without its password, for logs and messages."""
    if _scheme(url) in SENTINEL_SCHEMES:
        s = parse_sentinel(url)
        hosts = ",".join(f"{h}:{p}" for h, p in s.sentinels)
        return f"{_scheme(url)}://{hosts}/{s.service}/{s.db}"
    parts = urlsplit(url)
    return url.replace(f":{parts.password}@", ":***@") if parts.password else url


def _socket_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if k.startswith("socket_")}


def async_pool(url: str, **kwargs: Any) -> aioredis.ConnectionPool:
    """An asyncio connection pool for the URL: plain, or one that follows the Sentinel's primary."""
    check(url)
    if _scheme(url) not in SENTINEL_SCHEMES:
        return aioredis.ConnectionPool.from_url(url, **kwargs)
    s = parse_sentinel(url)
    # redis-py's Sentinel classes carry no annotations
    manager = AsyncSentinel(list(s.sentinels), sentinel_kwargs=s.sentinel_kwargs(_socket_kwargs(kwargs)))  # type: ignore[no-untyped-call]
    conn = sentinel_connections.async_connection_class(s.tls)
    return AsyncSentinelPool(s.service, manager, is_master=True, connection_class=conn, **{**s.node_kwargs(), **kwargs})  # type: ignore[no-untyped-call]


def async_client(url: str, **kwargs: Any) -> aioredis.Redis:
    """An asyncio client for the URL that owns its pool (``aclose`` closes both)."""
    return aioredis.Redis.from_pool(async_pool(url, **kwargs))


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """A blocking client for the URL (the CLI, health checks, tests)."""
    check(url)
    if _scheme(url) not in SENTINEL_SCHEMES:
        return redis.Redis.from_url(url, **kwargs)
    s = parse_sentinel(url)
    # redis-py's Sentinel classes carry no annotations
    manager = Sentinel(list(s.sentinels), sentinel_kwargs=s.sentinel_kwargs(_socket_kwargs(kwargs)))  # type: ignore[no-untyped-call]
    conn = sentinel_connections.sync_connection_class(s.tls)
    pool = SentinelConnectionPool(
        s.service, manager, is_master=True, connection_class=conn, **{**s.node_kwargs(), **kwargs}
    )  # type: ignore[no-untyped-call]
    return redis.Redis.from_pool(pool)


def ping(url: str, timeout_s: float = 5.0) -> None:
    """Raise BadRedisURL for a URL toolq cannot use, RedisError when Redis does not answer in time."""
    client = sync_client(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    finally:
        client.close()


def answers(url: str, timeout_s: float = 0.5) -> bool:
    """Whether Redis answers at the URL, for the command line (`toolq demo`); never raises."""
    try:
        ping(url, timeout_s)
    except Exception:
        return False
    return True
