"""The tools of the MCP servers named in ``settings.mcp_servers``, as a ToolSource (where="mcp").

All the MCP work (sessions, naming, schemas, results) is the public package's ``toolq.mcp``, so
a tool service can serve the same servers; this is only the worker's view of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from toolq.mcp import McpServerConfig, McpTool, McpTools
from toolq.tools import CheckedCall, ToolOutcome
from toolq.tools.messages import unknown_tool
from toolq.wire.protocol import Where


class McpSource:
    where: Where = "mcp"

    def __init__(self, tools: McpTools):
        self.tools = tools

    @classmethod
    async def start(cls, servers: Sequence[McpServerConfig], *, reserved: Iterable[str] = (), **kw: Any) -> McpSource:
        """Open every server; an unreachable one is logged and tried again later, never fatal."""
        tools = McpTools(servers, reserved=reserved, **kw)
        await tools.start()
        return cls(tools)

    def names(self) -> list[str]:
        return self.tools.names()

    def _get(self, name: str) -> McpTool:
        found = self.tools.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def spec(self, name: str) -> dict[str, Any]:
        return self._get(name).schema.spec()

    def requires_approval(self, name: str) -> bool:
        return self._get(name).schema.requires_approval

    def idempotent(self, name: str) -> bool:
        return self._get(name).idempotent

    def check(self, name: str, arguments: Any) -> CheckedCall:
        found = self.tools.get(name)
        if found is None:
            return CheckedCall(name, None, [unknown_tool(name, self.names())], None)
        return found.schema.check(arguments)

    async def run(self, call: CheckedCall, *, call_id: str, effect_key: str, timeout_s: float) -> ToolOutcome:
        assert call.kwargs is not None  # the ToolBox runs only checked calls
        return await self.tools.call(call.name, call.kwargs, timeout_s=timeout_s, effect_key=effect_key)

    async def refresh(self) -> None:
        await self.tools.refresh()

    async def close(self) -> None:
        await self.tools.close()
