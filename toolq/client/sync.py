"""``SyncClient``: the SDK without asyncio, for scripts and notebooks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from toolq.client.client import Client, Functions
from toolq.client.threads import SyncThreadMethods
from toolq.client.webhooks import SyncWebhookMethods
from toolq.client_tools import Approver
from toolq.wire.api import ApprovalDecision, JobView, ModelView, ToolResult, ToolSpec
from toolq.wire.protocol import Event, JobRequest, JobResult, JobStatus

__all__ = ["SyncClient"]

T = TypeVar("T")


class SyncClient(SyncThreadMethods, SyncWebhookMethods):
    """Blocking facade over Client for scripts: the async client runs on a private event loop in a
    background thread, so it also works where a loop is already running (a notebook)."""

    _client: Client

    def __init__(self, url: str | None = None, api_key: str | None = None, *, redis_url: str | None = None, **kw: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="toolq-sync-client", daemon=True)
        self._thread.start()

        async def make() -> Client:  # built on the loop, so its connections belong to it
            return Client(url, api_key, redis_url=redis_url, **kw)

        self._client = self._run(make())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def submit(
        self, request: JobRequest | str | None = None, *, idempotency_key: str | None = None, **fields: Any
    ) -> str:
        return self._run(self._client.submit(request, idempotency_key=idempotency_key, **fields))

    def job(self, job_id: str) -> JobView:
        return self._run(self._client.job(job_id))

    def events(self, job_id: str, after: int | None = None) -> Iterator[Event]:
        agen = self._client.events(job_id, after)
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())

    def result(self, job_id: str, timeout: float | None = None) -> JobResult:
        return self._run(self._client.result(job_id, timeout))

    def cancel(self, job_id: str) -> JobStatus:
        return self._run(self._client.cancel(job_id))

    def submit_tool_results(self, job_id: str, results: Sequence[ToolResult | dict[str, Any]]) -> JobView:
        return self._run(self._client.submit_tool_results(job_id, results))

    def submit_approvals(self, job_id: str, decisions: Sequence[ApprovalDecision | dict[str, Any]]) -> JobView:
        return self._run(self._client.submit_approvals(job_id, decisions))

    def run(
        self,
        request: JobRequest | str | None = None,
        *,
        client_tools: Functions = (),
        approve: Approver | None = None,
        timeout: float | None = None,
        **fields: Any,
    ) -> JobResult:
        """Client.run: the functions and ``approve`` are called on the client's own thread."""
        return self._run(
            self._client.run(request, client_tools=client_tools, approve=approve, timeout=timeout, **fields)
        )

    def tools(self) -> list[ToolSpec]:
        return self._run(self._client.tools())

    def models(self) -> list[ModelView]:
        return self._run(self._client.models())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
