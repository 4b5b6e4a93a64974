"""What running one call produced, and a tool's return value as the text the model reads."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

__all__ = ["ToolOutcome", "render_result"]


@dataclass(frozen=True)
class ToolOutcome:
    """What running one call produced. On failure ``content`` carries the same text as ``error``,
    so the loop can feed it back to the model as the tool response either way."""

    ok: bool
    content: str
    error: str | None
    duration_ms: float


def render_result(value: Any) -> str:
    """A str as it is; anything else as compact JSON. Raises TypeError/ValueError when it is not
    JSON (a circular structure, say)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=_to_jsonable, ensure_ascii=False, separators=(",", ":"))


def _to_jsonable(value: Any) -> Any:
    """``default=`` for json.dumps: pydantic models, dataclasses and enums by value, else str."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return list(value)
    return str(value)
