"""MCP servers' tool listings as the tools a model sees: checked, named, each a SchemaTool.

A tool keeps the server's own name when that name is unique. When two servers, or a server and
the names in ``reserved`` (the worker's own tools), share a name, each such tool is named
``<server>_<tool>`` instead, so neither hides the other and the names do not depend on which
server answered first. A tool whose name is not a valid function name (``check_tool_name``), or
whose ``inputSchema`` is not a valid JSON Schema for an object (``check_parameters``), is skipped
with a warning that names it; the server's other tools are served.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import structlog
from mcp import types

from toolq.mcp.config import McpServerConfig
from toolq.tools.schema_tool import SchemaTool
from toolq.wire.definitions import check_parameters, check_tool_name
from toolq.wire.limits import MAX_DESCRIPTION

__all__ = ["McpTool", "name_tools"]

log = structlog.get_logger("toolq.mcp")


@dataclass(frozen=True)
class McpTool:
    name: str  # as the model sees it
    server: str
    remote_name: str  # as the server knows it
    schema: SchemaTool
    # safe to run again under the same effect key (params._meta carries it: toolq/mcp/connection.py)
    idempotent: bool = False


def name_tools(
    listings: Sequence[tuple[McpServerConfig, Sequence[types.Tool]]], reserved: Collection[str] = ()
) -> dict[str, McpTool]:
    counts = Counter(t.name for _, tools in listings for t in tools)
    out: dict[str, McpTool] = {}
    for config, tools in listings:
        for t in tools:
            clash = counts[t.name] > 1 or t.name in reserved
            name = f"{config.name}_{t.name}" if clash else t.name
            try:
                check_tool_name(name)
                if name in out or name in reserved:
                    raise ValueError(f"the name {name!r} is already taken")
                params = check_parameters(name, t.inputSchema)
            except ValueError as e:
                log.warning("mcp_tool_skipped", server=config.name, tool=t.name, reason=str(e))
                continue
            description = (t.description or "")[:MAX_DESCRIPTION]
            schema = SchemaTool(name, description, params, config.needs_approval(t.name), config.timeout_s)
            out[name] = McpTool(name, config.name, t.name, schema, config.runs_again(t))
    return out
