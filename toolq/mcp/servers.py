"""The tools of a set of MCP servers: started together, named in one namespace (``toolq/mcp/naming.py``), called with a
time limit, each call's outcome a ToolOutcome that never raises.

A server that cannot be reached at start is logged and left out until it answers: ``refresh`` (a
job named a tool that no source holds) and its tools' calls try it again, within its backoff. A
server that dies keeps its tools listed; their calls fail with a text that says so, and the next
call starts it again (``toolq/mcp/connection.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import structlog
from mcp import McpError

from toolq.mcp.config import McpServerConfig
from toolq.mcp.connection import McpConnection, McpUnavailable
from toolq.mcp.naming import McpTool, name_tools
from toolq.mcp.results import result_text
from toolq.tools.results import ToolOutcome

__all__ = ["McpTools"]

log = structlog.get_logger("toolq.mcp")


class McpTools:
    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        reserved: Iterable[str] = (),
        backoff_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        errlog: TextIO | None = None,
    ):
        self.connections = {
            c.name: McpConnection(c, backoff_s=backoff_s, backoff_cap_s=backoff_cap_s, errlog=errlog) for c in servers
        }
        self.reserved = frozenset(reserved)  # names taken by the caller's other tools
        self._tools: dict[str, McpTool] = {}
        self._generations: tuple[int, ...] = ()

    async def start(self) -> None:
        """Open every server at once; one that fails is logged (by its connection) and skipped."""
        await asyncio.gather(*(self._try_open(c) for c in self.connections.values()))

    async def refresh(self) -> None:
        """Try again the servers that are down and due for a try."""
        due = [c for c in self.connections.values() if not c.is_open and c.retry_in() == 0]
        await asyncio.gather(*(self._try_open(c) for c in due))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections.values()))

    def names(self) -> list[str]:
        return list(self._named())

    def get(self, name: str) -> McpTool | None:
        return self._named().get(name)

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float, effect_key: str | None = None
    ) -> ToolOutcome:
        started = time.perf_counter()

        def outcome(ok: bool, text: str) -> ToolOutcome:
            elapsed = (time.perf_counter() - started) * 1000.0
            if not ok:
                log.warning("mcp_call_failed", tool=name, error=text)
            return ToolOutcome(ok=ok, content=text, error=None if ok else text, duration_ms=elapsed)

        tool = self.get(name)
        if tool is None:
            return outcome(False, f"tool {name!r} is not served by any MCP server")
        conn = self.connections[tool.server]
        limit = tool.schema.timeout_s or timeout_s
        try:
            result = await conn.call(tool.remote_name, arguments, limit, effect_key=effect_key)
        except TimeoutError:
            return outcome(False, f"tool {name!r} timed out after {limit:g} s")
        except McpUnavailable as e:
            return outcome(False, f"tool {name!r} failed: {e}")
        except McpError as e:
            refused = f"MCP server {tool.server!r} refused the call: {e.error.message}"
            return outcome(False, f"tool {name!r} failed: {refused}")
        except Exception as e:  # the SDK's own checks of a result (its output schema) raise plain errors
            return outcome(False, f"tool {name!r} failed: {type(e).__name__}: {e}")
        text = result_text(result)
        if result.isError:
            return outcome(False, f"tool {name!r} failed: {text or 'the MCP server reported an error'}")
        return outcome(True, text)

    async def _try_open(self, conn: McpConnection) -> None:
        try:
            await conn.open()
        except McpUnavailable:
            pass  # logged by the connection, with when it is tried again

    def _named(self) -> dict[str, McpTool]:
        generations = tuple(c.generation for c in self.connections.values())
        if generations != self._generations:  # a session (re)opened: its listing may have changed
            listings = [(c.config, c.tools) for c in self.connections.values()]
            self._tools = name_tools(listings, self.reserved)
            self._generations = generations
        return self._tools
