"""The gateway's seats for followers (gateway/followers.py): the cap per tenant, and a seat given
back however its follower ends, including a stream whose body never ran."""

from __future__ import annotations

import gc

import pytest

from gateway.followers import Seats
from toolq.errors import TooManyFollowers


async def _body(items: list[int]):
    for i in items:
        yield i


def test_the_cap_is_per_tenant_and_names_its_setting():
    seats = Seats(per_tenant=2, retry_after_s=3)
    held = [seats.take("a"), seats.take("a")]
    with pytest.raises(TooManyFollowers) as e:
        seats.take("a")
    assert e.value.status == 429 and e.value.field == "max_followers_per_tenant"
    assert "TOOLQ_MAX_FOLLOWERS_PER_TENANT=2" in e.value.message and e.value.headers["Retry-After"] == "3"
    seats.take("b")  # another tenant is not counted against a's cap
    held[0].release()
    held[0].release()  # twice is once
    assert seats.taken["a"] == 1
    seats.take("a")


async def test_a_stream_gives_its_seat_back_when_it_ends_is_closed_or_never_runs():
    seats = Seats(per_tenant=5, retry_after_s=1)
    ended = seats.take("a").hold(_body([1, 2]))
    assert [i async for i in ended] == [1, 2]
    assert seats.taken["a"] == 0

    closed = seats.take("a").hold(_body([1, 2]))
    assert await closed.__anext__() == 1
    await closed.aclose()  # the client left mid-stream
    assert seats.taken["a"] == 0

    never = seats.take("a").hold(_body([1]))  # the client left before the first byte
    assert seats.taken["a"] == 1
    del never
    gc.collect()
    assert seats.taken["a"] == 0

    with seats.take("a"):  # a request that waits for its job's end
        assert seats.taken["a"] == 1
    assert seats.taken["a"] == 0
