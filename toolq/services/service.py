"""``ToolService``: serve the ``@tool`` functions of a process to every worker, over Redis.

An instance registers its tools in Redis with a heartbeat (``store/services.py``), reads
the calls of each tool from the tool's stream as one consumer of a consumer group (so several
instances share the load), runs each with its registry's ``check`` and ``run`` (validation,
timeouts, the thread cap), posts the result and acknowledges the call in one script
(``store/lua/service_result.lua``). While a call runs its lease is renewed; a call left pending by
an instance that died is claimed by another one once it has sat idle for a lease (XAUTOCLAIM).
SIGTERM (with ``handle_signals``) or ``stop()``: stop reading, finish the calls in hand, leave.

With ``mcp`` it also serves the tools of MCP servers (``toolq.mcp.McpTools``), opened when it
starts: a fleet reaches an MCP server through one service instead of through every worker.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import structlog

from store import redis_urls
from store.errors import RedisError, ResponseError
from store.journal import DEFAULT_TTL_S, Journal
from store.services import ServiceInfo, deregister_service, register_service
from store.tool_calls import CallStreams, calls_stream
from toolq.services.calls import RESULT_TTL_MS, ServiceCall, encode_outcome
from toolq.settings import DEFAULT_REDIS_URL
from toolq.tools import REGISTRY, CallContext, CheckedCall, ToolOutcome, ToolRegistry
from toolq.tracing import SpanKind, parent_context
from toolq.tracing.genai import INSTANCE
from toolq.tracing.tool_span import tool_failed, tool_span
from toolq.wire.protocol import now_ms

if TYPE_CHECKING:
    from toolq.mcp import McpTools

__all__ = ["ToolService", "serve"]

log = structlog.get_logger("toolq.services")

FORGET_EVERY = 60  # beats between sweeps for consumers of dead instances
FORGET_IDLE_MS = 10 * 60 * 1000


class ToolService:
    """Serves the tools of ``registry`` (default: the process-wide REGISTRY that ``@tool`` fills).

    ``concurrency``: calls run at once by this instance. ``lease_ms``: how long a call may sit
    without its instance renewing it before another instance claims it.
    """

    def __init__(
        self,
        registry: ToolRegistry | None = None,
        *,
        redis_url: str | None = None,
        redis: Any = None,
        concurrency: int = 16,
        lease_ms: int = 3000,
        instance_id: str | None = None,
        mcp: McpTools | None = None,
        read_block_ms: int = 500,
        effect_ttl_s: float = DEFAULT_TTL_S,
    ):
        if concurrency < 1 or lease_ms < 100:
            raise ValueError("concurrency must be >= 1 and lease_ms >= 100")
        self.registry = registry if registry is not None else REGISTRY
        self.redis_url = redis_url or DEFAULT_REDIS_URL
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.heartbeat_ms = max(lease_ms // 3, 50)
        self.read_block_ms = read_block_ms  # bounds how long a stop waits for the reader
        self.id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.ready = asyncio.Event()  # set once registered and reading
        self.handled = 0
        self._beats = 0
        self._redis = redis
        self._own_redis = redis is None
        self._stopping = asyncio.Event()
        self._done = False  # run is leaving: the heartbeat stops
        self._room = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self._inflight: dict[str, tuple[str, asyncio.Task[None]]] = {}  # entry id -> (stream, task)
        self._offset_ms = 0  # Redis's clock minus ours: deadlines are on Redis's clock
        self.mcp = mcp
        self.effect_ttl_s = effect_ttl_s  # how long the effect journal keeps a record (toolq/tools/journal.py)
        self._journal: Journal | None = None
        self._streams = {calls_stream(n): n for n in self.registry.names()}

    def stop(self) -> None:
        """Stop reading; ``run`` returns once the calls in hand are answered."""
        self._stopping.set()

    async def run(self, *, handle_signals: bool = False) -> None:
        if self.mcp is not None:
            await self.mcp.start()  # an unreachable server is logged; its tools come when it answers
            self._streams.update({calls_stream(n): n for n in self.mcp.names() if n not in self.registry})
        if not self._streams:
            raise ValueError("there are no tools to serve")
        if self._redis is None:
            self._redis = redis_urls.async_client(self.redis_url)
        self._calls = CallStreams(self._redis, self.id)
        self._journal = Journal(self._redis, ttl_s=self.effect_ttl_s)
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        beats: asyncio.Task[None] | None = None
        try:
            await self._create_groups()
            await self._beat()
            beats = asyncio.create_task(self._heartbeat())
            self.ready.set()
            log.info("tool service ready", instance=self.id, tools=sorted(self._streams.values()))
            await self._read()
            if self._inflight:
                await asyncio.gather(*(t for _, t in list(self._inflight.values())), return_exceptions=True)
        finally:
            self._done = True
            if beats is not None:
                beats.cancel()
                # Not gather: Python 3.10-3.11's wait_for (in _heartbeat) can swallow a cancel that
                # lands as its beat finishes; the loop then ends on _done at its next turn instead.
                await asyncio.wait({beats}, timeout=max(self.lease_ms / 1000, 1.0) + 1)
            with suppress(RedisError):
                await self._leave()
            if self.mcp is not None:
                await self.mcp.close()
            if self._own_redis:
                await self._redis.aclose()
            log.info("tool service stopped", instance=self.id, handled=self.handled)

    # -- reading calls ---------------------------------------------------------------------------

    async def _create_groups(self) -> None:
        await self._calls.create_groups(list(self._streams))

    async def _read(self) -> None:
        while not self._stopping.is_set():
            free = self.concurrency - len(self._inflight)
            if free <= 0:
                self._room.clear()
                with suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._room.wait(), self.read_block_ms / 1000)
                continue
            try:
                got = await self._calls.read(list(self._streams), free, self.read_block_ms)
            except ResponseError:
                raise  # a refusal other than a lost group (the store makes that one again) is no blip
            except RedisError as e:
                log.warning("reading calls failed; retrying", error=str(e))
                await asyncio.sleep(0.5)
                continue
            for stream, entry_id, fields in got:
                self._take(stream, entry_id, fields)

    def _take(self, stream: str, entry_id: bytes, fields: dict[bytes, bytes] | None) -> None:
        eid = entry_id.decode()
        if eid in self._inflight:
            return
        call = ServiceCall.from_entry(eid, fields or {})
        task = asyncio.create_task(self._handle(stream, eid, call))
        self._inflight[eid] = (stream, task)

        def done(_: asyncio.Task[None]) -> None:
            self._inflight.pop(eid, None)
            self._room.set()

        task.add_done_callback(done)

    async def _handle(self, stream: str, eid: str, call: ServiceCall | None) -> None:
        tool = self._streams[stream]
        if call is None:
            log.warning("dropping a malformed call", tool=tool, entry=eid)
            await self._drop(stream, eid)
            return
        async with self._slots:
            remaining_ms = call.deadline_ms - (now_ms() + self._offset_ms)
            if remaining_ms <= 0:  # its caller has given up: nobody would read the result
                log.info("dropping a call past its deadline", tool=tool, call_id=call.call_id)
                await self._drop(stream, eid)
                return
            # the worker's span for this call, continued here when the call carries its context
            parent = parent_context(call.trace)
            with tool_span(
                tool,
                call.call_id,
                "service",
                kind=SpanKind.CONSUMER,
                context=parent,
                effect_key=call.call_id,  # a service's call id is the call's effect key
                **{INSTANCE: self.id},
            ):
                outcome = await self._run(tool, call.call_id, call.arguments, remaining_ms / 1000)
                if not outcome.ok:
                    tool_failed(outcome.error)
        payload = encode_outcome(outcome)
        for attempt in range(3):
            try:
                status = await self._calls.post(stream, tool, eid, call.call_id, payload, RESULT_TTL_MS)
                break
            except RedisError as e:
                # Left pending, the call is claimed and run again by another instance.
                log.warning("posting a result failed", tool=tool, call_id=call.call_id, error=str(e), attempt=attempt)
                await asyncio.sleep(0.2 * (attempt + 1))
        else:
            return
        self.handled += 1
        if status != b"accepted":
            log.info("result not accepted", tool=tool, call_id=call.call_id, status=status.decode())

    async def _run(self, tool: str, call_id: str, arguments: Any, timeout_s: float) -> ToolOutcome:
        # the call id is the call's effect key (worker/sources/services.py sends it as one)
        if tool in self.registry or self.mcp is None:
            context = CallContext(key=call_id, tool=tool, journal=self._journal)
            return await self.registry.run(self.registry.check(tool, arguments), timeout_s=timeout_s, context=context)
        found = self.mcp.get(tool)
        checked = found.schema.check(arguments) if found else CheckedCall(tool, None, [f"no tool {tool!r}"], None)
        if checked.errors or checked.kwargs is None:
            text = "; ".join(checked.errors)
            return ToolOutcome(ok=False, content=text, error=text, duration_ms=0.0)
        return await self.mcp.call(tool, checked.kwargs, timeout_s=timeout_s, effect_key=call_id)

    def _specs(self) -> tuple[dict[str, Any], ...]:
        specs = [
            {
                **t.spec(),
                "requires_approval": t.requires_approval,
                "timeout_s": t.timeout_s,
                "idempotent": t.idempotent is not False,  # at least once already: see Tool.idempotent
            }
            for t in (self.registry.get(n) for n in self.registry.names())
        ]
        for name in self._streams.values():
            found = self.mcp.get(name) if self.mcp is not None and name not in self.registry else None
            if found is not None:
                sch = found.schema
                specs.append(
                    {
                        **sch.spec(),
                        "requires_approval": sch.requires_approval,
                        "timeout_s": sch.timeout_s,
                        "idempotent": found.idempotent,
                    }
                )
        return tuple({**s, "where": "service"} for s in specs)

    async def _drop(self, stream: str, eid: str) -> None:
        with suppress(RedisError):
            await self._calls.drop(stream, eid)

    # -- heartbeat: the fleet entry, leases of calls in hand, calls of dead instances --------

    async def _heartbeat(self) -> None:
        while not self._done:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            try:
                await asyncio.wait_for(self._beat(), max(self.lease_ms / 1000, 1.0))
            except (RedisError, asyncio.TimeoutError) as e:
                log.warning("tool service heartbeat failed", error=repr(e))

    async def _beat(self) -> None:
        self._offset_ms = await self._calls.server_time_ms() - now_ms()
        tools = self._specs()
        info = ServiceInfo(
            id=self.id,
            tools=tools,
            heartbeat_ms=now_ms(),
            concurrency=self.concurrency,
            busy=len(self._inflight),
            host=socket.gethostname(),
            pid=os.getpid(),
        )
        await register_service(self._redis, info, 3 * self.heartbeat_ms)
        for eid, (stream, _) in list(self._inflight.items()):
            await self._calls.renew(stream, eid)
        self._beats += 1
        if not self._stopping.is_set():
            await self._claim()
            if self._beats % FORGET_EVERY == 1:
                await self._forget_dead_consumers()

    async def _claim(self) -> None:
        """Take the calls that instances which died left pending for a lease."""
        for stream in self._streams:
            free = self.concurrency - len(self._inflight)
            if free <= 0:
                return
            for _, entry_id, fields in await self._calls.claim(stream, self.lease_ms, free):
                log.warning("claimed a call of a lost instance", tool=self._streams[stream], entry=entry_id)
                self._take(stream, entry_id, fields)

    async def _forget_dead_consumers(self) -> None:
        """Delete the group's consumers that hold nothing and have not read for a long while:
        instances that died (their calls were claimed already). A live instance reads every
        ``read_block_ms``, and one deleted anyway is recreated by its next read."""
        for stream in self._streams:
            await self._calls.forget_idle_consumers(stream, FORGET_IDLE_MS)

    async def _leave(self) -> None:
        await deregister_service(self._redis, self.id)
        await self._calls.leave(list(self._streams))


def serve(registry: ToolRegistry | None = None, **options: Any) -> None:
    """Run a ToolService until SIGTERM or Ctrl-C (what ``toolq tools serve`` does)."""
    asyncio.run(ToolService(registry, **options).run(handle_signals=True))
