"""Tool-call formats, registered in one table.

A format is one module here that defines ``FORMAT``, an instance of a ToolCallFormat subclass
(worker/formats/base.py); adding a format is adding its module and a row to ``FORMATS``. What
several formats share lives in ``common`` (reading calls) and ``tagged`` (JSON between tags).
"""

from __future__ import annotations

from worker.formats import functionary_v2, hermes, mixtral, thoughtful_steps
from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition

DEFAULT_FORMAT = "hermes"
FORMATS: dict[str, ToolCallFormat] = {
    "hermes": hermes.FORMAT,
    "mixtral": mixtral.FORMAT,
    "functionary_v2": functionary_v2.FORMAT,
    "thoughtful_steps": thoughtful_steps.FORMAT,
}


def available_formats() -> list[str]:
    return sorted(FORMATS)


def get_format(name: str = DEFAULT_FORMAT) -> ToolCallFormat:
    if name not in FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; available: {', '.join(available_formats())}")
    return FORMATS[name]


__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "ParsedOutput",
    "ToolCallFormat",
    "ToolDefinition",
    "available_formats",
    "get_format",
]
