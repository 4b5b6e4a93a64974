"""The SDK over the gateway: each Transport call is one HTTP request (httpx), events are the
gateway's SSE stream (httpx-sse), and error answers become toolq.errors through
``errors.from_response``, the one place that reads the gateway's error body."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from pydantic import BaseModel, Field

from toolq import errors
from toolq.client.transport import Retryable, StreamEnded, caller_trace
from toolq.wire.api import ApprovalDecision, JobView, ModelView, ToolResult, ToolSpec
from toolq.wire.protocol import ActionKind, Event, JobRequest, JobStatus

__all__ = ["ClientSettings", "HttpTransport"]

_ANSWERS_PATH: dict[ActionKind, str] = {"client": "tool_results", "approval": "approvals"}


class ClientSettings(BaseModel):
    """Defaults for the HTTP mode: ``TOOLQ_URL`` and ``TOOLQ_API_KEY``.

    Read from the environment by hand rather than with pydantic-settings, which the light client
    does not install (its two packages would take ``pip install toolq`` past 14, pyproject.toml)."""

    url: str = Field(default_factory=lambda: os.environ.get("TOOLQ_URL") or "http://127.0.0.1:8000")
    api_key: str | None = Field(default_factory=lambda: os.environ.get("TOOLQ_API_KEY") or None)


class HttpTransport:
    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        stream_read_timeout: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
    ):
        env = ClientSettings()
        self.url = (url or env.url).rstrip("/")
        key = api_key if api_key is not None else env.api_key
        # Sent with each request rather than set on the httpx client, which may be the caller's.
        self.auth = {"Authorization": f"Bearer {key}"} if key else {}
        self.stream_read_timeout = stream_read_timeout
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(base_url=self.url, timeout=timeout)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        headers = {**self.auth, **kw.pop("headers", {})}
        response = await self._http.request(method, path, headers=headers, **kw)
        if response.status_code >= 400:
            raise _error(response)
        return response.json()

    async def submit(self, request: JobRequest, idempotency_key: str | None) -> str:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        trace = caller_trace()  # the caller's span: the job's spans continue its trace (gateway/tracing.py)
        if trace:
            headers.update(trace.as_dict())
        body = await self._call(
            "POST", "/v1/jobs", json=request.model_dump(mode="json", exclude_unset=True), headers=headers
        )
        accepted: str = body["job_id"]
        return accepted

    async def job(self, job_id: str) -> JobView:
        return JobView.model_validate(await self._call("GET", f"/v1/jobs/{job_id}"))

    async def events(self, job_id: str, after: int) -> AsyncGenerator[Event, None]:
        headers = dict(self.auth)
        if after:
            headers["Last-Event-ID"] = str(after)
        timeout = httpx.Timeout(self._http.timeout.connect, read=self.stream_read_timeout)
        try:
            async with aconnect_sse(
                self._http, "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=timeout
            ) as source:
                resp = source.response
                if resp.status_code == 204:
                    raise StreamEnded()  # the job ended and we have had everything
                if resp.status_code >= 500:
                    raise Retryable(f"HTTP {resp.status_code}")
                if resp.status_code >= 400:
                    await resp.aread()
                    raise _error(resp)
                async for message in source.aiter_sse():
                    if message.data:  # a block with only a retry: field carries no event
                        yield Event.model_validate_json(message.data)
        except (httpx.TransportError, OSError) as e:
            raise Retryable(str(e)) from e

    async def cancel(self, job_id: str) -> JobStatus:
        return JobStatus((await self._call("POST", f"/v1/jobs/{job_id}/cancel"))["status"])

    async def answer(self, job_id: str, answers: Sequence[ToolResult | ApprovalDecision], kind: ActionKind) -> JobView:
        body = [a.model_dump(mode="json") for a in answers]
        return JobView.model_validate(await self._call("POST", f"/v1/jobs/{job_id}/{_ANSWERS_PATH[kind]}", json=body))

    async def tools(self) -> list[ToolSpec]:
        return [ToolSpec.model_validate(t) for t in (await self._call("GET", "/v1/tools"))["tools"]]

    async def models(self) -> list[ModelView]:
        return [ModelView.model_validate(m) for m in (await self._call("GET", "/v1/models"))["data"]]


def _error(response: httpx.Response) -> errors.ToolqError:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return errors.from_response(response.status_code, body, dict(response.headers))
