"""The errors the tool package raises to its callers (registration, loading, looking up)."""

from __future__ import annotations

from collections.abc import Iterable


class ToolRegistrationError(ValueError):
    """A function cannot be registered as a tool (bad signature, duplicate name, ...)."""


class ToolLoadError(ImportError):
    """A tool module named in the settings could not be imported."""


class UnknownToolError(KeyError):
    """Names asked for are not registered. ``names`` lists the unknown ones; ``named_by`` says
    which part of a request asked for them (``tool_choice``), when not the tool list itself.

    A job that asks for one ends with the ``unknown_tool`` error (``worker/endings.py``); no other
    KeyError does."""

    def __init__(self, names: Iterable[str], known: Iterable[str], *, named_by: str | None = None):
        self.names = list(names)
        self.known = list(known)
        self.named_by = named_by
        super().__init__(self.names)

    def __str__(self) -> str:  # KeyError's own str() would repr-quote the message
        unknown = ", ".join(repr(n) for n in self.names)
        known = ", ".join(self.known) or "(none)"
        asked = f"{self.named_by} names " if self.named_by else ""
        return f"{asked}unknown tool(s) {unknown}; registered tools: {known}"
