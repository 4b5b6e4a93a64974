"""The SDK's pure parts: building requests, reading SSE frames (over a mock transport), turning error answers
into exceptions."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from toolq import Client, SyncClient, errors
from toolq.client import build_request
from toolq.wire.protocol import Event, EventType, JobRequest, Message


def test_package_exports_the_clients():
    import toolq

    assert toolq.Client is Client and toolq.SyncClient is SyncClient


def test_build_request_from_a_prompt_a_request_or_fields():
    r = build_request("hi", system="be brief", tools=["say"], max_iterations=2)
    assert [(m.role, m.content) for m in r.messages] == [("system", "be brief"), ("user", "hi")]
    assert r.tools == ["say"] and r.max_iterations == 2
    assert "max_tokens" not in r.model_fields_set  # left to the gateway's defaults and caps
    base = JobRequest(messages=[Message(role="user", content="x")], max_tokens=10)
    again = build_request(base, temperature=0.5)
    assert again.max_tokens == 10 and again.temperature == 0.5 and again.messages == base.messages
    assert build_request(messages=[{"role": "user", "content": "y"}]).messages[0].content == "y"
    with pytest.raises(ValidationError):
        build_request("hi", max_iterations=0)
    with pytest.raises(TypeError):
        build_request(42)  # type: ignore[arg-type]


def sse_event(seq: int, type: str) -> str:
    return Event(job_id="job_1", seq=seq, type=EventType(type), ts=0).model_dump_json()


async def test_events_read_frames_comments_and_multiline_data_and_resume_with_last_event_id():
    queued = sse_event(1, "queued")
    head, tail = queued.split(",", 1)
    # The first connection: a retry-only block, a keep-alive comment, data split over two lines, a field without
    # its space; then the stream drops before the terminal event. The second replays seq 2 (which must not come
    # twice) and ends with the final event; a third finds nothing left: 204.
    bodies = [
        (
            f"retry: 1000\n\n: keep-alive\n\nid: 1\nevent: queued\ndata: {head},\ndata: {tail}\n\n"
            f"id:2\ndata:{sse_event(2, 'started')}\n\n"
        ),
        (
            f"id: 2\nevent: started\ndata: {sse_event(2, 'started')}\n\n"
            f"id: 3\nevent: final\ndata: {sse_event(3, 'final')}\n\n"
        ),
    ]
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("last-event-id"))
        if not bodies:
            return httpx.Response(204)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=bodies.pop(0))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://gateway") as http:
        client = Client("http://gateway", http_client=http)
        events = [e async for e in client.events("job_1")]
        assert [(e.seq, e.type) for e in events] == [
            (1, EventType.queued),
            (2, EventType.started),
            (3, EventType.final),
        ]
        assert asked == [None, "2"]
        assert [e async for e in client.events("job_1", after=3)] == [] and asked[-1] == "3"


def test_error_answers_become_typed_exceptions():
    e = errors.from_response(422, {"error": {"code": "unknown_model", "message": "no", "field": "model"}})
    assert isinstance(e, errors.UnknownModel) and isinstance(e, errors.InvalidRequest) and e.field == "model"
    full = errors.from_response(429, {"error": {"code": "queue_full", "message": "full"}}, {"retry-after": "7"})
    assert isinstance(full, errors.QueueFull) and full.retry_after_s == 7
    gone = errors.from_response(404, {"error": {"code": "job_not_found", "message": "x"}})
    assert isinstance(gone, errors.JobNotFoundError) and isinstance(gone, errors.NotFound)
    odd = errors.from_response(502, "<html>bad gateway</html>")
    assert type(odd) is errors.ToolqError and "502" in odd.message
    # the body the gateway sends is the body the SDK reads
    assert errors.from_response(401, errors.Unauthorized("key?").body()).code == "unauthorized"


def test_http_mode_takes_its_defaults_from_the_environment(monkeypatch):
    monkeypatch.setenv("TOOLQ_URL", "http://gw.example:9000/")
    monkeypatch.setenv("TOOLQ_API_KEY", "k")
    c = Client()
    assert c.url == "http://gw.example:9000" and c.transport.auth == {"Authorization": "Bearer k"}
    assert not c.direct
