"""The toolq SDK: submit jobs, follow their events, fetch results, cancel; over HTTP or Redis.

Over the gateway (HTTP, API key)::

    import toolq

    async with toolq.Client("http://gateway:8000", api_key="...") as client:
        job_id = await client.submit("Calculate the zorbix of 15 and 7", tools=["calculate_zorbix"])
        async for event in client.events(job_id):      # replays, follows, resumes after a drop
            print(event.seq, event.type.value, event.data)
        result = await client.result(job_id, timeout=60)
        print(result.content)

Straight into Redis, for a service inside the same network (no gateway hop, no key, no caps)::

    client = toolq.Client(redis_url="redis://redis:6379/0")

From a script, without asyncio::

    with toolq.SyncClient("http://127.0.0.1:8000") as client:
        job_id = client.submit("hello")
        print(client.result(job_id, timeout=60).content)

Watching without the SDK: every event of every job is published on the Redis channel
``toolq:events``, and each job's on ``toolq:events:<job_id>`` (the payload is the event JSON)::

    import json, redis.asyncio as redis

    async def watch(url="redis://127.0.0.1:6379/0"):
        pubsub = redis.Redis.from_url(url).pubsub()
        await pubsub.subscribe("toolq:events")            # or f"toolq:events:{job_id}"
        async for msg in pubsub.listen():
            if msg["type"] == "message":
                event = json.loads(msg["data"])          # {"job_id", "seq", "type", "ts", "data"}
                print(event["job_id"], event["type"])

Tools that the caller runs itself: the job pauses (status ``requires_action``) when the model calls
one, and resumes once the results are posted. ``run`` does all of it with plain Python functions,
and asks ``approve`` about calls that need approval::

    def lookup_user(name: str) -> str:
        \"\"\"Look a user up in our directory.\"\"\"
        return directory[name]

    result = await client.run("Who is ann?", client_tools=[lookup_user], approve=lambda call: True)

By hand: follow the events; on ``requires_action`` its ``data["calls"]`` lists the calls, answered
with ``submit_tool_results(job_id, [{"tool_call_id": ..., "content": ...}])`` or
``submit_approvals(job_id, [{"tool_call_id": ..., "approved": True}])``.

Pub/sub delivers only what happens while subscribed; ``Client.events`` also replays what came
before and never loses an event across a reconnect.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from httpx_sse import aconnect_sse
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolq import errors
from toolq.api import ApprovalDecision, JobView, ModelView, ToolResult, ToolSpec
from toolq.client_tools import Approver, ClientTools
from toolq.protocol import ActionKind, Event, EventType, JobRequest, JobResult, JobStatus, Message, PendingAction
from toolq.thread_client import SyncThreadMethods, ThreadMethods

if TYPE_CHECKING:
    from toolq.store.jobstore import JobStore

__all__ = ["Client", "ClientSettings", "SyncClient"]

T = TypeVar("T")
Functions = Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]]

DIRECT_TENANT = "default"  # direct-mode jobs belong to the tenant an open gateway uses


class ClientSettings(BaseSettings):
    """Defaults for the HTTP mode: ``TOOLQ_URL`` and ``TOOLQ_API_KEY``."""

    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore")

    url: str = "http://127.0.0.1:8000"
    api_key: str | None = None


def build_request(request: JobRequest | str | None = None, **fields: Any) -> JobRequest:
    """A JobRequest from a JobRequest, a prompt (with an optional ``system=``) or bare fields."""
    system = fields.pop("system", None)
    if isinstance(request, JobRequest):
        return JobRequest.model_validate({**request.model_dump(exclude_unset=True), **fields})
    if isinstance(request, str):
        messages = [Message(role="system", content=system)] if system else []
        messages.append(Message(role="user", content=request))
        return JobRequest(messages=messages, **fields)
    if request is None:
        return JobRequest(**fields)
    raise TypeError(f"submit() takes a JobRequest or a prompt string, not {type(request).__name__}")


class Client(ThreadMethods):
    """Async SDK. HTTP mode over the gateway by default; Redis mode with ``redis_url``."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        redis_url: str | None = None,
        timeout: float = 30.0,
        reconnect_attempts: int = 20,
        stream_read_timeout: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
    ):
        self.direct = redis_url is not None
        self.reconnect_attempts = reconnect_attempts
        self.stream_read_timeout = stream_read_timeout
        self._store: JobStore | None = None
        self._http: httpx.AsyncClient | None = None
        if redis_url is not None:
            from toolq.store.jobstore import JobStore  # Redis mode only: HTTP users need no arq

            self._store = JobStore.from_url(redis_url)
            return
        env = ClientSettings()
        self.url = (url or env.url).rstrip("/")
        key = api_key if api_key is not None else env.api_key
        # Sent with each request rather than set on the httpx client, which may be the caller's.
        self._auth = {"Authorization": f"Bearer {key}"} if key else {}
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(base_url=self.url, timeout=timeout)

    async def aclose(self) -> None:
        if self._http is not None and self._owns_http:
            await self._http.aclose()
        if self._store is not None:
            await self._store.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def _jobs(self) -> JobStore:
        assert self._store is not None, "Redis mode only"
        return self._store

    # ------------------------------------------------------------------ HTTP plumbing

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        assert self._http is not None
        headers = {**self._auth, **kw.pop("headers", {})}
        response = await self._http.request(method, path, headers=headers, **kw)
        if response.status_code >= 400:
            raise _error(response)
        return response.json()

    # ------------------------------------------------------------------ jobs

    async def submit(
        self, request: JobRequest | str | None = None, *, idempotency_key: str | None = None, **fields: Any
    ) -> str:
        """Submit a job; returns its id. ``request`` is a JobRequest or a prompt; ``fields`` are
        JobRequest fields (tools, tool_choice, max_iterations, model, ...) plus ``system``."""
        req = build_request(request, **fields)
        if self.direct:
            from toolq.store.fleet import read_fleet

            model = (await read_fleet(self._jobs.redis)).resolve(req)
            job_id, _ = await self._jobs.submit(req, model=model, tenant=DIRECT_TENANT, idempotency_key=idempotency_key)
            return job_id
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = await self._call(
            "POST", "/v1/jobs", json=req.model_dump(mode="json", exclude_unset=True), headers=headers
        )
        accepted: str = body["job_id"]
        return accepted

    async def job(self, job_id: str) -> JobView:
        """Status and, once ended, result of a job."""
        if self.direct:
            return JobView.of_record(job_id, await self._direct(self._jobs.record(job_id), job_id))
        return JobView.model_validate(await self._call("GET", f"/v1/jobs/{job_id}"))

    async def events(self, job_id: str, after: int | None = None) -> AsyncGenerator[Event, None]:
        """Every event of the job after ``after`` (default: from the start), live until the
        terminal one. A dropped connection is resumed from the last seq received, so each event
        comes exactly once; after ``reconnect_attempts`` failures in a row it gives up."""
        last = after or 0
        failures = 0
        while True:
            progressed = False
            source = self._direct_events(job_id, last) if self.direct else self._sse(job_id, last)
            try:
                async with aclosing(source):  # closes the HTTP stream even if the caller stops early
                    async for event in source:
                        if event.seq <= last:
                            continue  # defensive: never hand out an event twice
                        last, progressed = event.seq, True
                        yield event
                        if event.terminal:
                            return
            except _Ended:
                return
            except (httpx.TransportError, OSError, _Retryable) as e:
                error: BaseException | None = e
            except Exception as e:
                if not _is_redis_outage(e):
                    raise
                error = e
            else:
                error = None  # the stream ended without a terminal event (server restart): resume
            failures = 0 if progressed else failures + 1
            if failures > self.reconnect_attempts:
                raise errors.Unavailable(f"lost the event stream of job {job_id} after {failures} attempts: {error}")
            await asyncio.sleep(min(0.05 * 2 ** min(failures, 6), 2.0))

    async def _sse(self, job_id: str, last: int) -> AsyncGenerator[Event, None]:
        assert self._http is not None
        headers = dict(self._auth)
        if last:
            headers["Last-Event-ID"] = str(last)
        timeout = httpx.Timeout(self._http.timeout.connect, read=self.stream_read_timeout)
        async with aconnect_sse(
            self._http, "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=timeout
        ) as source:
            resp = source.response
            if resp.status_code == 204:
                raise _Ended()  # the job ended and we have had everything
            if resp.status_code >= 500:
                raise _Retryable(f"HTTP {resp.status_code}")
            if resp.status_code >= 400:
                await resp.aread()
                raise _error(resp)
            async for message in source.aiter_sse():
                if message.data:  # a block with only a retry: field carries no event
                    yield Event.model_validate_json(message.data)

    async def _direct_events(self, job_id: str, last: int) -> AsyncGenerator[Event, None]:
        from toolq.store.jobstore import JobNotFound

        try:
            rec = await self._jobs.record(job_id)
            if rec.get("terminal") == "1" and last >= int(rec.get("seq", 0)):
                raise _Ended()  # JobStore.follow would wait for an event that never comes
            async for event in self._jobs.follow(job_id, last):
                if event is not None:
                    yield event
        except JobNotFound:
            raise errors.JobNotFoundError(f"job {job_id!r} not found", field="job_id") from None

    async def result(self, job_id: str, timeout: float | None = None) -> JobResult:
        """Wait for the job to end and return its result; TimeoutError after ``timeout`` seconds."""

        async def wait() -> JobResult:
            view = await self.job(job_id)
            if view.result is not None:
                return view.result
            async for event in self.events(job_id):
                if event.terminal:
                    break
            view = await self.job(job_id)
            assert view.result is not None, "a terminal event is always stored with its result"
            return view.result

        try:
            return await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            raise TimeoutError(f"job {job_id} did not end within {timeout} s") from None

    async def cancel(self, job_id: str) -> JobStatus:
        """Cancel a queued or running job; returns the status right after (running while the
        worker is stopping it; the ``cancelled`` event follows)."""
        if self.direct:
            return await self._direct(self._jobs.cancel(job_id), job_id)
        return JobStatus((await self._call("POST", f"/v1/jobs/{job_id}/cancel"))["status"])

    # ------------------------------------------------------------------ paused jobs

    async def submit_tool_results(self, job_id: str, results: Sequence[ToolResult | dict[str, Any]]) -> JobView:
        """Post the results of client-executed calls of a paused job (``{tool_call_id, content,
        is_error?}`` each); the job resumes once every call it waits on is answered."""
        checked = [ToolResult.model_validate(r) for r in results]
        return await self._post_answers(job_id, "tool_results", checked, "client")

    async def submit_approvals(self, job_id: str, decisions: Sequence[ApprovalDecision | dict[str, Any]]) -> JobView:
        """Approve or deny calls of a paused job (``{tool_call_id, approved, reason?}`` each)."""
        checked = [ApprovalDecision.model_validate(d) for d in decisions]
        return await self._post_answers(job_id, "approvals", checked, "approval")

    async def _post_answers(
        self, job_id: str, path: str, answers: Sequence[ToolResult | ApprovalDecision], kind: ActionKind
    ) -> JobView:
        if self.direct:
            pairs = [(a.tool_call_id, a.answer()) for a in answers]
            await self._direct(self._jobs.answer_actions(job_id, pairs, kind), job_id)
            return await self.job(job_id)
        body = [a.model_dump(mode="json") for a in answers]
        return JobView.model_validate(await self._call("POST", f"/v1/jobs/{job_id}/{path}", json=body))

    async def run(
        self,
        request: JobRequest | str | None = None,
        *,
        client_tools: Functions = (),
        approve: Approver | None = None,
        timeout: float | None = None,
        tool_timeout_s: float = 300.0,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> JobResult:
        """Submit a job whose ``client_tools`` (Python functions, sync or async, by name or a list)
        run here, answer every pause until the job ends, and return its result.

        The functions are offered to the model alongside the request's ``tools`` (with ``tools``
        unset, the job gets only them). Calls that need approval are put to ``approve(call) ->
        bool | (bool, reason)``; without it they are denied. A function that raises answers with
        an error result, as a worker's tool does.
        """
        tools = ClientTools(client_tools, approve=approve, timeout_s=tool_timeout_s)
        req = build_request(request, **fields)
        have = set(req.tool_names())
        extra = [d for d in tools.definitions() if d.name not in have]
        if extra:
            req = build_request(req, tools=[*(req.tools or []), *extra])
        job_id = await self.submit(req, idempotency_key=idempotency_key)

        async def follow() -> JobResult:
            async for event in self.events(job_id):
                if event.type == EventType.requires_action:
                    await self._answer_pause(
                        job_id, [PendingAction.model_validate(c) for c in event.data["calls"]], tools
                    )
            return await self.result(job_id)

        try:
            return await asyncio.wait_for(follow(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"job {job_id} did not end within {timeout} s") from None

    async def _answer_pause(self, job_id: str, calls: list[PendingAction], tools: ClientTools) -> None:
        decisions = [await tools.decision(c) for c in calls if c.kind == "approval"]
        results = [await tools.result(c) for c in calls if c.kind == "client"]
        try:
            if decisions:
                await self.submit_approvals(job_id, decisions)
            if results:
                await self.submit_tool_results(job_id, results)
        except errors.Conflict:
            pass  # the job ended (cancelled, past its deadline) meanwhile: its terminal event follows

    # ------------------------------------------------------------------ catalog

    async def tools(self) -> list[ToolSpec]:
        """Tools the live workers serve (OpenAI function specs), with the models serving each."""
        if self.direct:
            from toolq.store.fleet import read_fleet

            return (await read_fleet(self._jobs.redis)).tool_specs()
        return [ToolSpec.model_validate(t) for t in (await self._call("GET", "/v1/tools"))["tools"]]

    async def models(self) -> list[ModelView]:
        """Models the live workers serve, with worker counts and queue depth."""
        if self.direct:
            from toolq.store.fleet import read_fleet

            fleet = await read_fleet(self._jobs.redis)
            return await fleet.describe(self._jobs.redis, fleet.models())
        return [ModelView.model_validate(m) for m in (await self._call("GET", "/v1/models"))["data"]]

    async def _direct(self, coro: Awaitable[T], job_id: str) -> T:
        from toolq.store.jobstore import JobNotFound

        try:
            return await coro
        except JobNotFound:
            raise errors.JobNotFoundError(f"job {job_id!r} not found", field="job_id") from None


class _Ended(Exception):
    """The job has ended and every event after the asked seq was delivered."""


class _Retryable(Exception):
    """A server-side failure worth reconnecting for (5xx while following)."""


def _error(response: httpx.Response) -> errors.ToolqError:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return errors.from_response(response.status_code, body, dict(response.headers))


def _is_redis_outage(exc: BaseException) -> bool:
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError
    except ImportError:
        return False
    return isinstance(exc, (RedisConnectionError, RedisTimeoutError))


class SyncClient(SyncThreadMethods):
    """Blocking facade over Client for scripts: the async client runs on a private event loop in a
    background thread, so it also works where a loop is already running (a notebook)."""

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
