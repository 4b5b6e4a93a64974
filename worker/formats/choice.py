"""The tool-call format a worker (or ``toolq render``) uses: the one asked for, or with ``auto``
the one the chat template's source teaches (worker/formats/detect.py), hermes when none is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.formats import DEFAULT_FORMAT, FORMATS, ToolCallFormat, available_formats
from worker.formats.detect import detect_format

AUTO = "auto"


@dataclass(frozen=True)
class FormatChoice:
    format: ToolCallFormat
    # How it was chosen: "asked" (named), "detected" (from the template) or "fallback".
    how: str
    warning: str | None = None

    @property
    def name(self) -> str:
        return self.format.name


def check_format_name(name: str) -> None:
    """Raise ValueError for a name that is neither ``auto`` nor a registered format."""
    if name != AUTO and name not in FORMATS:
        known = ", ".join([AUTO, *available_formats()])
        raise ValueError(f"unknown tool-call format {name!r}; available: {known}")


def choose_format(name: str, template_source: str) -> FormatChoice:
    """The format for ``name`` (a format, or ``auto``) with this template; ValueError for an
    unknown name."""
    check_format_name(name)
    if name != AUTO:
        return FormatChoice(FORMATS[name], "asked")
    detected = detect_format(template_source)
    if detected is not None and detected in FORMATS:
        return FormatChoice(FORMATS[detected], "detected")
    what = f"detected {detected!r}, which is not a registered format" if detected else "no known tool-call markup"
    warning = (
        f"the chat template's tool-call format is unknown ({what}); using {DEFAULT_FORMAT}. "
        "Pass --format to choose one."
    )
    return FormatChoice(FORMATS[DEFAULT_FORMAT], "fallback", warning)
