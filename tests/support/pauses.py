"""Paused jobs made straight in Redis, as a worker leaves them, for tests of the answer path that
need no worker; the tool definitions that make a real job pause (a client tool, a gated one); and
the wait for a job's status over HTTP."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import httpx

from store.jobstore import JobStore
from store.submission import Submission
from toolq.wire.protocol import EventType, JobRequest, JobStatus, Message, PendingAction, now_ms


def client_tool(name: str, description: str, param: str) -> dict[str, Any]:
    """A tool the caller runs: the job pauses for its result (requires_action)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {param: {"type": "string"}}, "required": [param]},
        },
        "execution": "client",
    }


WEATHER = client_tool("get_weather", "The current weather in a city", "city")
# the worker's own calculate_zorbix, run only once the caller approves the call
GATED_ZORBIX = {
    "type": "function",
    "function": {"name": "calculate_zorbix"},
    "execution": "server",
    "requires_approval": True,
}


async def wait_status(
    http: httpx.AsyncClient, job_id: str, *statuses: str, timeout: float = 20, every_s: float = 0.05
) -> dict[str, Any]:
    """Poll GET /v1/jobs/{id} until the job's status is one of ``statuses``; its view then."""
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = (await http.get(f"/v1/jobs/{job_id}")).json()
        if view["status"] in statuses:
            return view
        assert time.monotonic() < deadline, f"job {job_id} is {view['status']}, not {statuses}"
        await asyncio.sleep(every_s)


def pending(call_id: str, kind: Literal["client", "approval"], name: str = "lookup") -> PendingAction:
    return PendingAction(id=call_id, name=name, arguments={"q": call_id}, kind=kind, where="client")


async def paused_job(
    store: JobStore, *calls: PendingAction, tenant: str = "default", model: str = "m", deadline_ms: int | None = None
) -> str:
    """A job paused by its first attempt (status requires_action), waiting on ``calls``."""
    job_id, _ = await store.submit(
        Submission(JobRequest(messages=[Message(role="user", content="hi")]), model=model, tenant=tenant)
    )
    await store.emit(job_id, EventType.started, {}, attempt=1, status=JobStatus.running, lease_ms=10_000)
    await store.pause(
        job_id,
        attempt=1,
        pending=list(calls),
        deadline_ms=deadline_ms or now_ms() + 60_000,
        checkpoint={"messages": [{"role": "user", "content": "hi"}], "iterations": 1},
    )
    return job_id
