"""The one parser of Redis URLs (store/redis_urls.py): Sentinel URLs in every form it takes,
and bad URLs refused with a message that says what is wrong."""

from __future__ import annotations

import pytest
import redis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.backoff import NoBackoff
from redis.sentinel import SentinelConnectionPool

from store import redis_urls
from store.arq_link import connect
from store.redis_urls import BadRedisURL, SentinelURL, parse_sentinel


def test_sentinel_url_with_hosts_service_and_db():
    s = parse_sentinel("redis+sentinel://10.0.0.1:26379,10.0.0.2:26380,sentinel-c/mymaster/3")
    assert s == SentinelURL(
        sentinels=(("10.0.0.1", 26379), ("10.0.0.2", 26380), ("sentinel-c", 26379)), service="mymaster", db=3
    )


def test_sentinel_url_defaults_db_0_and_takes_passwords_and_tls():
    s = parse_sentinel("rediss+sentinel://app:s%40cret@[::1]:5000/svc?sentinel_password=sp")
    assert s.sentinels == (("::1", 5000),)
    assert (s.service, s.db, s.tls) == ("svc", 0, True)
    assert (s.username, s.password, s.sentinel_password) == ("app", "s@cret", "sp")
    assert s.node_kwargs() == {"db": 0, "username": "app", "password": "s@cret", "ssl": True}
    assert s.sentinel_kwargs({"socket_timeout": 2}) == {"socket_timeout": 2, "password": "sp", "ssl": True}


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h1:26379", "names its service"),
        ("redis+sentinel://h1:26379/", "names its service"),
        ("redis+sentinel://h1:26379/svc/0/extra", "/SERVICE or /SERVICE/DB"),
        ("redis+sentinel://h1:26379/svc/zero", "must be a number"),
        ("redis+sentinel://h1:notaport/svc", "port must be a number"),
        ("redis+sentinel://h1:70000/svc", "port must be a number"),
        ("redis+sentinel://h1:1,,h2:2/svc", "empty sentinel address"),
        ("redis+sentinel://:26379/svc", "has no host"),
        ("redis+sentinel://h1/svc?master=x", "unknown option(s) master"),
    ],
)
def test_bad_sentinel_urls_say_what_is_wrong(url, says):
    with pytest.raises(BadRedisURL) as e:
        redis_urls.check(url)
    assert str(e.value).startswith(f"bad Redis URL {url!r}: ") and says in str(e.value)


@pytest.mark.parametrize("url", ["http://h:6379/0", "redis+cluster://h:7000", "memcached://x"])
def test_unknown_schemes_are_refused_with_the_list_understood(url):
    with pytest.raises(BadRedisURL) as e:
        redis_urls.check(url)
    message = str(e.value)
    assert "unknown Redis URL scheme" in message
    assert "redis+sentinel://" in message and "rediss://" in message


def test_a_url_without_a_scheme_is_refused():
    with pytest.raises(BadRedisURL, match="starts with one of"):
        redis_urls.check("localhost:6379")


def test_plain_urls_go_to_redis_py():
    redis_urls.check("redis://localhost:6379/2")
    redis_urls.check("unix:///run/redis.sock?db=1")
    with pytest.raises(BadRedisURL, match="bad Redis URL 'redis://localhost:badport/0': Port could not"):
        redis_urls.check("redis://localhost:badport/0")


def test_clients_for_every_kind_of_url():
    plain = redis_urls.sync_client("redis://localhost:6379/2")
    assert plain.connection_pool.connection_kwargs["db"] == 2
    sent = redis_urls.sync_client("redis+sentinel://h1:1,h2:2/svc/4", socket_timeout=3)
    pool = sent.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.is_master and pool.service_name == "svc"
    assert pool.connection_kwargs["db"] == 4
    assert [
        (c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
        for c in pool.sentinel_manager.sentinels
    ] == [("h1", 1), ("h2", 2)]
    arq = connect("rediss+sentinel://h1:1/svc")
    assert isinstance(arq.connection_pool, AsyncSentinelPool)
    assert arq.connection_pool.connection_kwargs.get("retry") is not None  # rides out the failover
    assert "SSL" in arq.connection_pool.connection_class.__name__


def test_describe_hides_passwords():
    assert redis_urls.describe("redis://:hunter2@h:6379/0") == "redis://:***@h:6379/0"
    assert "hunter2" not in redis_urls.describe("redis+sentinel://u:hunter2@h:1/svc")


def test_a_sentinel_that_answers_nothing_is_a_connection_error():
    # nothing listens on port 1: redis-py's own MasterNotFoundError, a ConnectionError
    r = redis_urls.sync_client("redis+sentinel://127.0.0.1:1/svc", socket_connect_timeout=0.2)
    with pytest.raises(redis.ConnectionError):
        r.ping()


async def test_each_try_at_the_primary_asks_the_sentinels_again():
    """A connect to the address the sentinels named is tried once: the retry around it asks them
    again, so a connect begun as the primary died never lands on that machine when it comes back
    empty (store/sentinel_connections.py)."""
    seen: list[tuple[str, int]] = []
    retry = AsyncRetry(NoBackoff(), 3)
    url = "redis+sentinel://127.0.0.1:1/svc"
    # the errors store/arq_link.py's retrying_pool retries on, a refused connect (OSError) among them
    pool = redis_urls.async_pool(url, retry=retry, retry_on_error=[redis.ConnectionError, OSError])

    async def named() -> tuple[str, int]:  # nothing listens on port 1: every try is refused
        seen.append(("127.0.0.1", 1))
        return ("127.0.0.1", 1)

    pool.get_master_address = named
    conn = pool.make_connection()
    tries: list[int] = []
    socket_connect = conn._connect

    async def counted() -> None:
        tries.append(conn.port)
        await socket_connect()

    conn._connect = counted
    with pytest.raises(redis.ConnectionError):
        await conn.connect()
    # redis-py's own connection would knock 4 times at each address it was given: 16 in all
    assert (len(seen), len(tries)) == (4, 4)  # an address asked for before each try, one connect each
    await pool.disconnect()
