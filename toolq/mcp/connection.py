"""One MCP server's session, held open by one task, re-opened with backoff when it dies.

The SDK's transports and ``ClientSession`` are anyio context managers whose cancel scopes must be
entered and exited in the same task. So each open session has a holder task that enters them,
initializes, lists the tools, then waits until it is told to close or its transport fails. Calls
go through the session from any task (requests are matched to responses by id) and race the
holder, so a transport that fails under a call fails the call at once rather than at its timeout.

A session that is lost is not re-opened in the background: the next call (or ``refresh``) opens a
new one, no sooner than the backoff allows, so a server that dies on every start costs one spawn
per backoff period rather than a spawn loop.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import httpx
import structlog
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from toolq.mcp.config import McpServerConfig
from toolq.tracing import current_carrier

__all__ = ["EFFECT_KEY_META", "McpConnection", "McpUnavailable"]

log = structlog.get_logger("toolq.mcp")

EFFECT_KEY_META = "toolq/effect_key"  # params._meta key of a call's effect key (toolq/tools/effects.py)
MAX_PAGES = 100  # of tools/list: a server whose cursor never ends must not hang the start
# Errors that mean the transport is gone, as opposed to a server that answered with an error.
_LOST = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError, httpx.TransportError)


class McpUnavailable(Exception):
    """The server cannot take the call now; the message says why, for the model and the logs."""


class _NotSent(Exception):
    """The session was already closed when the request was written: the server never saw it."""


@dataclass
class _Held:
    session: ClientSession
    holder: asyncio.Task[None]
    stop: asyncio.Event
    error: list[str] = field(default_factory=list)  # why the holder ended, when it failed


class McpConnection:
    def __init__(
        self,
        config: McpServerConfig,
        *,
        backoff_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        errlog: TextIO | None = None,
    ):
        self.config = config
        self.backoff_s, self.backoff_cap_s = backoff_s, backoff_cap_s
        self.errlog = errlog  # a stdio server's stderr; default: this process's
        self.tools: list[types.Tool] = []  # from the last session that opened
        self.generation = 0  # sessions opened so far: a new one may list other tools
        self.last_error: str | None = None
        self._held: _Held | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._ending: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def is_open(self) -> bool:
        return self._held is not None and not self._held.holder.done()

    def retry_in(self) -> float:
        return max(0.0, self._retry_at - time.monotonic())

    async def open(self, timeout_s: float | None = None, *, now: bool = False) -> None:
        """Make sure a session is open; McpUnavailable when it cannot be. Inside the backoff
        period after a failure this fails at once, unless ``now``."""
        await self._ensure(timeout_s or self.config.connect_timeout_s, now=now)

    async def call(
        self, name: str, arguments: dict[str, Any], timeout_s: float, *, effect_key: str | None = None
    ) -> types.CallToolResult:
        """The server's result. Raises McpUnavailable (no session, or it was lost during the call),
        McpError (the server answered with a JSON-RPC error) or TimeoutError. ``effect_key``
        travels in params._meta under ``EFFECT_KEY_META``."""
        deadline = time.monotonic() + timeout_s
        held = await self._ensure(min(self.config.connect_timeout_s, timeout_s))
        try:
            result = await self._request(held, name, arguments, deadline, effect_key)
        except _NotSent:
            # The server died while idle; the request never left, so sending it again is safe.
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError from None
            held = await self._ensure(min(self.config.connect_timeout_s, remaining), now=True)
            result = await self._request(held, name, arguments, deadline, effect_key)
        self._failures = 0
        return result

    async def close(self) -> None:
        """End the session and its server; later calls fail instead of starting it again."""
        async with self._lock:
            self._closed = True
            held, self._held = self._held, None
        if held is not None:
            held.stop.set()
            self._ending.add(held.holder)
        for task in list(self._ending):
            # a stdio server gets its stdin closed, 2 s to exit, then SIGTERM and SIGKILL (the SDK's order)
            done, _ = await asyncio.wait({task}, timeout=6.0)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._ending.clear()

    # ------------------------------------------------------------ the session

    async def _ensure(self, timeout_s: float, *, now: bool = False) -> _Held:
        async with self._lock:
            if self._closed:
                raise McpUnavailable(f"MCP server {self.name!r} is closed: this process is shutting down")
            held = self._held
            if held is not None and not held.holder.done():
                return held
            if held is not None:
                self._lose(held, held.error[0] if held.error else "the session ended")
                if now:
                    self._retry_at = 0.0
            wait = self.retry_in()
            if wait > 0 and not now:
                raise McpUnavailable(
                    f"MCP server {self.name!r} is unavailable ({self.last_error}); next try in {wait:.1f} s"
                )
            try:
                self._held = await self._start(timeout_s)
            except McpUnavailable as e:
                self._failed(str(e))
                raise
            self.generation += 1
            return self._held

    async def _start(self, timeout_s: float) -> _Held:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[tuple[ClientSession, list[types.Tool]]] = loop.create_future()
        stop = asyncio.Event()
        errors: list[str] = []
        holder = asyncio.create_task(self._hold(ready, stop, errors, timeout_s), name=f"mcp-{self.name}")
        try:
            session, tools = await ready
        except BaseException:
            stop.set()
            if not holder.done():  # cancelled while it starts: it must not go on holding a process
                holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
            raise
        self.tools = tools
        self.last_error = None
        log.info("mcp_server_open", server=self.name, tools=[t.name for t in tools])
        return _Held(session, holder, stop, errors)

    async def _hold(
        self,
        ready: asyncio.Future[tuple[ClientSession, list[types.Tool]]],
        stop: asyncio.Event,
        errors: list[str],
        timeout_s: float,
    ) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(timeout_s):
                    await session.initialize()
                    tools = await _list_tools(session)
                ready.set_result((session, tools))
                await stop.wait()
        except Exception as e:  # an ExceptionGroup from a transport's task group too
            text = _describe(e)
            if isinstance(_leaf(e), TimeoutError) and not ready.done():
                text = f"no answer within {timeout_s:g} s"
            errors.append(text)
            if not ready.done():
                ready.set_exception(McpUnavailable(f"MCP server {self.name!r} could not be started: {text}"))
            elif not stop.is_set():
                log.warning("mcp_server_lost", server=self.name, error=text)
        finally:
            if not ready.done():
                ready.cancel()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        c = self.config
        if c.command is not None:
            params = StdioServerParameters(command=c.command[0], args=c.command[1:], env=c.env, cwd=c.cwd)
            async with stdio_client(params, errlog=self.errlog or _stderr()) as (read, write):
                yield read, write
        else:
            assert c.url is not None
            async with (
                httpx.AsyncClient(headers=c.headers, timeout=httpx.Timeout(30.0, read=300.0)) as client,
                streamable_http_client(c.url, http_client=client) as (read, write, _),
            ):
                yield read, write

    async def _request(
        self, held: _Held, name: str, arguments: dict[str, Any], deadline: float, effect_key: str | None
    ) -> types.CallToolResult:
        # The caller's span rides in params._meta, under the keys MCP reserves for W3C trace
        # context (traceparent, tracestate), so a traced server continues the job's trace; the
        # call's effect key beside it, under a name of ours (MCP's prefix/name form).
        trace = current_carrier()
        meta: dict[str, Any] = trace.as_dict() if trace else {}
        if effect_key:
            meta[EFFECT_KEY_META] = effect_key
        request = (
            held.session.call_tool(name, arguments, meta=meta) if meta else held.session.call_tool(name, arguments)
        )
        task = asyncio.ensure_future(request)
        try:
            done, _ = await asyncio.wait(
                {task, held.holder}, timeout=max(0.0, deadline - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task in done:
            try:
                return task.result()
            except anyio.ClosedResourceError:
                self._lose(held, "the session was closed")
                raise _NotSent from None
            except McpError as e:
                if e.error.code != types.CONNECTION_CLOSED:
                    raise
                self._lose(held, "the connection closed")
                raise McpUnavailable(f"MCP server {self.name!r} closed the connection during the call") from None
            except _LOST as e:
                self._lose(held, _describe(e))
                raise McpUnavailable(f"MCP server {self.name!r} was lost during the call: {_describe(e)}") from None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if held.holder in done:
            why = held.error[0] if held.error else "the session ended"
            self._lose(held, why)
            raise McpUnavailable(f"MCP server {self.name!r} was lost during the call: {why}")
        raise TimeoutError

    def _lose(self, held: _Held, why: str) -> None:
        """Forget a session that failed; its holder closes the transport (and reaps the process)."""
        if self._held is not held:
            return  # another call saw it first
        self._held = None
        held.stop.set()
        self._ending.add(held.holder)
        held.holder.add_done_callback(self._ending.discard)
        self._failed(f"MCP server {self.name!r} was lost: {why}")

    def _failed(self, why: str) -> None:
        # The first failure after a good spell retries at once (a server that died is restarted by
        # the next call); each failure after that doubles the wait.
        self._failures += 1
        delay = 0.0 if self._failures == 1 else min(self.backoff_s * 2 ** (self._failures - 2), self.backoff_cap_s)
        self._retry_at = time.monotonic() + delay
        self.last_error = why
        log.error("mcp_server_unavailable", server=self.name, error=why, retry_in_s=round(delay, 3))


def _stderr() -> TextIO:
    """Where a stdio server's stderr goes: ours, or the real one when ours is not a file (a
    capturing test runner's), since the child process needs a file descriptor."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or sys.stderr


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await session.list_tools(cursor)
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            break
    return tools


def _leaf(e: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(getattr(e, "exceptions", None), tuple) and e.exceptions:  # type: ignore[attr-defined]
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return e


def _describe(e: BaseException) -> str:
    leaf = _leaf(e)
    if isinstance(leaf, McpError):
        return leaf.error.message
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__
