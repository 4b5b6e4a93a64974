"""Tool-call styles. Each module here defines FORMAT; adding a style is adding a module."""

from __future__ import annotations

import importlib
import pkgutil

from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition

DEFAULT_FORMAT = "hermes"
# Modules in this package that are helpers, not styles.
_NOT_STYLES = {"base"}


def available_formats() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_STYLES)


def get_format(name: str = DEFAULT_FORMAT) -> ToolCallFormat:
    if name not in available_formats():
        raise ValueError(f"unknown tool-call format {name!r}; available: {', '.join(available_formats())}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.FORMAT


__all__ = ["DEFAULT_FORMAT", "ParsedOutput", "ToolCallFormat", "ToolDefinition", "available_formats", "get_format"]
