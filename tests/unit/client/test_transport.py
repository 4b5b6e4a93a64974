"""The SDK's transport seam: both transports have the one shape ``Client`` uses, store errors become
the SDK's through one table, and ``Client`` keeps the resume policy whatever the transport."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator

import pytest

from store.jobstore import JobNotFound, NotSubmitted, QueueAtLimit
from toolq import Client, errors
from toolq.client.http_transport import HttpTransport
from toolq.client.redis_transport import STORE_ERRORS, RedisTransport, store_errors
from toolq.client.transport import Retryable, StreamEnded, Transport
from toolq.wire.protocol import Event, EventType

_METHODS = [n for n, v in vars(Transport).items() if callable(v) and not n.startswith("_")]


def test_the_protocol_is_narrow_and_both_transports_have_its_exact_shape():
    assert sorted(_METHODS) == ["aclose", "answer", "cancel", "events", "job", "models", "submit", "tools"]
    for transport in (HttpTransport, RedisTransport):
        for name in _METHODS:
            ours, theirs = getattr(transport, name), getattr(Transport, name)
            assert inspect.signature(ours).parameters.keys() == inspect.signature(theirs).parameters.keys(), name
            assert inspect.isasyncgenfunction(ours) == (name == "events"), name


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (JobNotFound("job_x"), errors.JobNotFoundError),
        (QueueAtLimit("m", 5, 5), errors.QueueFull),
        (NotSubmitted("no model and no idempotency key"), errors.InvalidRequest),
    ],
)
def test_each_store_error_becomes_the_sdk_error_the_gateway_would_answer(raised, expected):
    with pytest.raises(expected) as got, store_errors("job_x"):
        raise raised
    assert type(got.value) is expected
    if expected is errors.JobNotFoundError:
        assert got.value.field == "job_id" and "job_x" in got.value.message


def test_the_table_lists_subclasses_before_their_bases():
    kinds = [kind for kind, _ in STORE_ERRORS]
    for i, kind in enumerate(kinds):
        assert not any(issubclass(kind, earlier) for earlier in kinds[:i]), kind


def test_other_errors_pass_through_unchanged():
    with pytest.raises(ValueError), store_errors("job_x"):
        raise ValueError("not the store's")


def _event(seq: int, type: EventType = EventType.token) -> Event:
    return Event(job_id="job_1", seq=seq, type=type, ts=0, data={"text": str(seq)} if type is EventType.token else {})


class ScriptedStream:
    """A transport whose event passes follow a script: each pass yields its events, then raises
    its ending (None: the stream just stops). Records the ``after`` of each pass."""

    def __init__(self, *passes: tuple[list[Event], BaseException | None]):
        self.passes = list(passes)
        self.asked: list[int] = []

    async def events(self, job_id: str, after: int) -> AsyncGenerator[Event, None]:
        self.asked.append(after)
        events, ending = self.passes.pop(0) if self.passes else ([], Retryable("down"))
        for e in events:
            yield e
        if ending is not None:
            raise ending

    async def aclose(self) -> None:
        pass


async def test_client_resumes_from_the_last_seq_and_never_repeats_an_event():
    stream = ScriptedStream(
        ([_event(1), _event(2)], Retryable("connection reset")),
        ([_event(2), _event(3)], None),  # a replay overlapping what was had; then the stream just ends
        ([_event(4, EventType.final)], None),
    )
    client = Client(transport=stream)  # type: ignore[arg-type]
    got = [e.seq async for e in client.events("job_1")]
    assert got == [1, 2, 3, 4]
    assert stream.asked == [0, 2, 3]


async def test_client_stops_quietly_when_the_transport_says_the_stream_ended():
    stream = ScriptedStream(([], StreamEnded()))
    assert [e async for e in Client(transport=stream).events("job_1", after=9)] == []  # type: ignore[arg-type]
    assert stream.asked == [9]


async def test_client_gives_up_after_reconnect_attempts_failures_in_a_row():
    stream = ScriptedStream()  # every pass fails at once
    client = Client(transport=stream, reconnect_attempts=2)  # type: ignore[arg-type]
    with pytest.raises(errors.Unavailable, match="after 3 attempts: down"):
        [e async for e in client.events("job_1")]
    assert stream.asked == [0, 0, 0]


async def test_an_sdk_error_from_the_transport_is_not_retried():
    stream = ScriptedStream(([], errors.JobNotFoundError("job 'job_1' not found", field="job_id")))
    with pytest.raises(errors.JobNotFoundError):
        [e async for e in Client(transport=stream).events("job_1")]  # type: ignore[arg-type]
    assert stream.asked == [0]
