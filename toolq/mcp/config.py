"""The MCP servers a worker or a tool service serves, as named in settings: a stdio command to
spawn, or a streamable-HTTP URL.

``[{"name": "files", "command": ["python", "-m", "files_server"], "env": {"ROOT": "/srv"}},
{"name": "web", "url": "http://127.0.0.1:8000/mcp"}]``
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolq.field_errors import validation_message

__all__ = ["McpServerConfig", "parse_servers"]


class McpServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Also the prefix of its tools' names when two servers (or the worker) have a tool of one name.
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    command: list[str] | None = Field(default=None, min_length=1)  # argv of a stdio server
    env: dict[str, str] | None = None  # added to the SDK's default environment (PATH, HOME, ...)
    cwd: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+")  # a streamable-HTTP endpoint
    headers: dict[str, str] | None = None
    timeout_s: float | None = Field(default=None, gt=0)  # a call's limit; default: the caller's tool timeout
    connect_timeout_s: float = Field(default=10.0, gt=0)  # start, initialize and list the tools
    # Calls that wait for the caller's approval: true for all of this server's tools, or a list of
    # the server's own tool names.
    requires_approval: bool | list[str] = False
    # Whether a call whose outcome a lost worker left unknown is run again under the same effect
    # key (params._meta["toolq/effect_key"]): true or false for all of this server's tools, or
    # null to follow each tool's own annotation (idempotentHint, false when absent).
    idempotent: bool | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError('give exactly one of "command" (a stdio server) or "url" (streamable HTTP)')
        if self.url is not None and (self.env is not None or self.cwd is not None):
            raise ValueError('"env" and "cwd" apply to a stdio "command" only')
        if self.command is not None and self.headers is not None:
            raise ValueError('"headers" apply to a "url" only')
        return self

    def runs_again(self, tool: Any) -> bool:
        """Whether ``tool`` (the server's listing of it) is declared safe to run again."""
        if self.idempotent is not None:
            return self.idempotent
        hints = getattr(tool, "annotations", None)
        return bool(getattr(hints, "idempotentHint", False))

    def needs_approval(self, remote_name: str) -> bool:
        if isinstance(self.requires_approval, bool):
            return self.requires_approval
        return remote_name in self.requires_approval


def parse_servers(raw: str | Sequence[Any] | None) -> list[McpServerConfig]:
    """The server list from its JSON text (or the decoded list); ValueError naming the bad entry."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"MCP servers: not JSON: {e}") from None
    if not isinstance(raw, list):
        raise ValueError('MCP servers: expected a JSON list of {"name": ..., "command": [...] or "url": ...}')
    out: list[McpServerConfig] = []
    for i, entry in enumerate(raw):
        label = f"MCP server #{i + 1}"
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            label += f" ({entry['name']!r})"
        if not isinstance(entry, dict):
            raise ValueError(f"{label}: expected an object, not {type(entry).__name__}")
        try:
            config = McpServerConfig.model_validate(entry)
        except ValidationError as e:
            raise ValueError(f"{label}: {validation_message(e)}") from None
        if any(c.name == config.name for c in out):
            raise ValueError(f"{label}: the name {config.name!r} is used twice")
        out.append(config)
    return out


def join_server_args(values: Sequence[str]) -> list[Any]:
    """Repeated ``--mcp JSON`` options (each one server object or a list of them) as one list."""
    servers: list[Any] = []
    for v in values:
        try:
            parsed = json.loads(v)
        except ValueError as e:
            raise ValueError(f"--mcp {v!r} is not JSON: {e}") from None
        servers.extend(parsed if isinstance(parsed, list) else [parsed])
    return servers
