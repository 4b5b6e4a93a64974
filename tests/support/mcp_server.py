"""A real MCP server for the tests, written with the SDK's FastMCP.

stdio by default; ``--http PORT`` serves streamable HTTP (uvicorn) at ``http://127.0.0.1:PORT/mcp``.
``--page N`` lists the tools N per page, so the client must follow the cursor. The listing also
carries two tools a client must skip: one whose inputSchema is not a JSON Schema and one whose
name is not a function name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from mcp import types
from mcp.server.fastmcp import Context, FastMCP

BROKEN = [
    types.Tool(
        name="broken_schema", description="bad", inputSchema={"type": "object", "properties": {"x": {"type": 5}}}
    ),
    types.Tool(name="bad.name", description="bad", inputSchema={"type": "object"}),
]


def build(page: int, port: int) -> FastMCP:
    server = FastMCP("toolq-test", port=port, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then say so."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def fail(message: str) -> str:
        """Always raises."""
        raise ValueError(message)

    @server.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @server.tool()
    def die() -> str:
        """Exit the server process in the middle of the call."""
        os._exit(3)

    @server.tool()
    def env(key: str) -> str:
        """An environment variable of the server process."""
        return os.environ.get(key, "")

    @server.tool()
    def trace_meta(ctx: Context) -> str:
        """The trace context and effect key the call's ``params._meta`` carried (JSON), as toolq sends them."""
        meta = ctx.request_context.meta  # the SDK keeps _meta's keys beyond its own as extras
        extra = (meta.model_extra or {}) if meta is not None else {}
        return json.dumps({k: extra[k] for k in ("traceparent", "tracestate", "toolq/effect_key") if k in extra})

    @server.tool()
    def weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"Sunny in {city}, 21 C (from the MCP server)"

    @server._mcp_server.list_tools()  # replaces FastMCP's handler: pages, and the broken tools
    async def listing(req: types.ListToolsRequest) -> types.ListToolsResult:
        tools = [*await server.list_tools(), *BROKEN]
        start = int(req.params.cursor) if req.params and req.params.cursor else 0
        end = start + page if page else len(tools)
        return types.ListToolsResult(tools=tools[start:end], nextCursor=str(end) if end < len(tools) else None)

    return server


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--http", type=int, help="serve streamable HTTP on this port")
    p.add_argument("--page", type=int, default=0, help="tools per page of tools/list (0: all)")
    args = p.parse_args()
    server = build(args.page, args.http or 8000)
    server.run("streamable-http" if args.http else "stdio")


if __name__ == "__main__":
    main()
