"""A tool's description and its arguments' descriptions, from a Google-style docstring."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["ToolDoc", "parse_docstring"]

_SECTION_RE = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns?|Raises|Yields?|Examples?|Notes?|See Also)\s*:\s*$",
    re.IGNORECASE,
)
_ARGS_HEADERS = {"args", "arguments", "parameters", "params"}
_ARG_LINE_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class ToolDoc:
    summary: str = ""
    arguments: dict[str, str] = field(default_factory=dict)  # parameter name -> description


def parse_docstring(doc: str) -> ToolDoc:
    return ToolDoc(summary=_doc_summary(doc), arguments=_doc_arg_descriptions(doc))


def _doc_summary(doc: str) -> str:
    """The first paragraph, joined into one line; a section header (``Args:``) also ends it."""
    lines = []
    for line in doc.splitlines():
        if not line.strip() or _SECTION_RE.match(line):
            if lines:
                break
            continue
        lines.append(line.strip())
    return " ".join(lines)


def _doc_arg_descriptions(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section (continuation lines joined)."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        header = _SECTION_RE.match(lines[i])
        i += 1
        if not header or header.group(1).lower() not in _ARGS_HEADERS:
            continue
        header_indent = _indent(lines[i - 1])
        entry_indent: Optional[int] = None
        current: Optional[str] = None
        while i < len(lines):
            line = lines[i]
            if line.strip():
                indent = _indent(line)
                if indent <= header_indent:
                    break  # the section ended
                if entry_indent is None:
                    entry_indent = indent
                match = _ARG_LINE_RE.match(line.strip()) if indent == entry_indent else None
                if match:
                    current = match.group(1)
                    out[current] = match.group(2).strip()
                elif current is not None:
                    out[current] = (out[current] + " " + line.strip()).strip()
            i += 1
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
