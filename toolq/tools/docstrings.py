"""A tool's description and its arguments' descriptions, from a Google-style docstring.

Parsing is docstring-parser's; what is kept of it is shaped for the model to read: the summary is
the whole first paragraph (the library's short description is only its first line), and every
text is joined into one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from docstring_parser import ParseError
from docstring_parser.google import DEFAULT_SECTIONS, GoogleParser, Section, SectionType

__all__ = ["ToolDoc", "parse_docstring"]

# Headers that also end the summary; the library's defaults lack these spellings.
_PARSER = GoogleParser(
    sections=[
        *DEFAULT_SECTIONS,
        Section("Return", "returns", SectionType.SINGULAR_OR_MULTIPLE),
        Section("Yield", "yields", SectionType.SINGULAR_OR_MULTIPLE),
        Section("Note", "notes", SectionType.SINGULAR),
        Section("Notes", "notes", SectionType.SINGULAR),
        Section("See Also", "see_also", SectionType.SINGULAR),
    ]
)


@dataclass(frozen=True)
class ToolDoc:
    summary: str = ""
    arguments: dict[str, str] = field(default_factory=dict)  # parameter name -> description


def parse_docstring(doc: str) -> ToolDoc:
    """The summary and the ``Args:`` descriptions of ``doc``; a malformed section (an entry
    without a colon, say) costs only the argument descriptions, never the registration."""
    try:
        parsed = _PARSER.parse(doc)
    except ParseError:
        title = _PARSER.titles_re.search(doc)
        parsed = _PARSER.parse(doc[: title.start()] if title else doc)
    summary_lines = [parsed.short_description or ""]
    if parsed.long_description and not parsed.blank_after_short_description:
        # The first paragraph goes on past the first line: the rest of it opens the long part.
        paragraph = parsed.long_description.splitlines()
        blank = next((i for i, line in enumerate(paragraph) if not line.strip()), len(paragraph))
        summary_lines += paragraph[:blank]
    arguments = {
        p.arg_name: _one_line((p.description or "").splitlines())
        for p in parsed.params
        if p.args[0] == "param"  # an Args: section, not Attributes: or Keyword Args:
    }
    return ToolDoc(summary=_one_line(summary_lines), arguments=arguments)


def _one_line(lines: Iterable[str]) -> str:
    return " ".join(line.strip() for line in lines if line.strip())
