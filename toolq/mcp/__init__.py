"""MCP servers as tool sources, for a worker or a tool service (needs the ``mcp`` extra).

``config`` (the server list from settings), ``connection`` (one server's session, held by one
task, re-opened with backoff), ``naming`` (listings as SchemaTools under unique names),
``results`` (a call's result as text), ``servers`` (``McpTools``: all of it together).
"""

from toolq.mcp.config import McpServerConfig, join_server_args, parse_servers
from toolq.mcp.connection import McpUnavailable
from toolq.mcp.naming import McpTool
from toolq.mcp.servers import McpTools

__all__ = ["McpServerConfig", "McpTool", "McpTools", "McpUnavailable", "join_server_args", "parse_servers"]
