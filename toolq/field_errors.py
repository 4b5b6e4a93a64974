"""A pydantic ValidationError said in one line that names each field, for the command line and
for configuration errors (``toolq/mcp/config.py``). It imports nothing of the house, so every
room can use it."""

from __future__ import annotations

from typing import Any


def validation_message(error: Any) -> str:
    """``messages: Input should be ...; max_tokens: ...``: one part per problem, by field path."""
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e['msg']}" if where else str(e["msg"]))
    return "; ".join(parts) or str(error)
