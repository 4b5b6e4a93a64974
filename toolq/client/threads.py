"""Threads in the SDK: methods that call /v1/threads over HTTP, mixed into ``Client`` and
``SyncClient`` (toolq/client/). Each calls the client's HTTP transport (or, for the sync one,
uses ``_client`` and ``_run``). Threads live behind the gateway: a Redis-mode client has none."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, Literal, TypeVar

from toolq.client.gateway_only import GatewayCalls
from toolq.wire.protocol import Message
from toolq.wire.thread_api import MessagePage, RunAccepted, Strategy, ThreadDeleted, ThreadList, ThreadView

Order = Literal["asc", "desc"]
T = TypeVar("T")


def _dumped(messages: Sequence[Message | dict[str, Any]]) -> list[Any]:
    return [m.model_dump(mode="json", exclude_none=True) if isinstance(m, Message) else m for m in messages]


def run_body(
    input: str | Sequence[Message | dict[str, Any]], strategy: Strategy, partial_history: bool, fields: dict[str, Any]
) -> dict[str, Any]:
    """A run's body: ``input`` a user prompt or messages, ``fields`` JobRequest fields."""
    messages = [{"role": "user", "content": input}] if isinstance(input, str) else _dumped(input)
    return {**fields, "messages": messages, "multitask_strategy": strategy, "partial_history": partial_history}


class ThreadMethods(GatewayCalls):
    """Client's thread methods (HTTP mode)."""

    async def create_thread(
        self,
        *,
        metadata: dict[str, str] | None = None,
        ttl_s: int | None = None,
        messages: Sequence[Message | dict[str, Any]] = (),
    ) -> ThreadView:
        """A thread on the server, optionally with a first history, metadata and a TTL."""
        body = {
            "metadata": metadata or {},
            "ttl_s": ttl_s,
            "messages": [
                m.model_dump(mode="json", exclude_none=True) if isinstance(m, Message) else m for m in messages
            ],
        }
        return ThreadView.model_validate(await self._call("POST", "/v1/threads", json=body))

    async def thread(
        self, thread_id: str, *, after: str | None = None, limit: int = 20, order: Order = "asc"
    ) -> ThreadView:
        """The thread and a page of its messages."""
        params = {"limit": limit, "order": order, **({"after": after} if after else {})}
        return ThreadView.model_validate(await self._call("GET", f"/v1/threads/{thread_id}", params=params))

    async def thread_messages(self, thread_id: str) -> list[Message]:
        """Every message of the thread, oldest first (all pages)."""
        out: list[Message] = []
        after: str | None = None
        while True:
            params = {"limit": 100, **({"after": after} if after else {})}
            page = MessagePage.model_validate(
                await self._call("GET", f"/v1/threads/{thread_id}/messages", params=params)
            )
            out += [m.message for m in page.data]
            if not page.has_more or page.last_id is None:
                return out
            after = page.last_id

    async def threads(self, *, limit: int = 20, before_ms: int | None = None) -> ThreadList:
        """Your threads, newest first."""
        params = {"limit": limit, **({"before_ms": before_ms} if before_ms is not None else {})}
        return ThreadList.model_validate(await self._call("GET", "/v1/threads", params=params))

    async def run_thread(
        self,
        thread_id: str,
        input: str | Sequence[Message | dict[str, Any]],
        *,
        multitask_strategy: Strategy = "enqueue",
        partial_history: bool = False,
        **fields: Any,
    ) -> RunAccepted:
        """Run the thread with new input; the run is a job (``result(accepted.job_id)``). ``fields``
        are JobRequest fields (tools, tool_choice, max_tokens, model, ...)."""
        body = run_body(input, multitask_strategy, partial_history, fields)
        return RunAccepted.model_validate(await self._call("POST", f"/v1/threads/{thread_id}/runs", json=body))

    async def delete_thread(self, thread_id: str) -> ThreadDeleted:
        """Delete the thread; its active and waiting runs are cancelled."""
        return ThreadDeleted.model_validate(await self._call("DELETE", f"/v1/threads/{thread_id}"))


class SyncThreadMethods:
    """SyncClient's thread methods: the same, blocking."""

    _client: ThreadMethods  # the async Client underneath

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError  # SyncClient's own: runs the coroutine on the client's loop

    def create_thread(self, **kw: Any) -> ThreadView:
        return self._run(self._client.create_thread(**kw))

    def thread(self, thread_id: str, **kw: Any) -> ThreadView:
        return self._run(self._client.thread(thread_id, **kw))

    def thread_messages(self, thread_id: str) -> list[Message]:
        return self._run(self._client.thread_messages(thread_id))

    def threads(self, **kw: Any) -> ThreadList:
        return self._run(self._client.threads(**kw))

    def run_thread(self, thread_id: str, input: str | Sequence[Message | dict[str, Any]], **kw: Any) -> RunAccepted:
        return self._run(self._client.run_thread(thread_id, input, **kw))

    def delete_thread(self, thread_id: str) -> ThreadDeleted:
        return self._run(self._client.delete_thread(thread_id))
