"""Hermes tags as Mixtral writes them: markdown-escaped underscores (``<tool\\_call>``, ``a\\_b``).

Same prompt, results and rendering as Hermes; the grammar allows the optional backslash before
every underscore in the tags and tool names, and the parser removes those escapes first.
"""

from __future__ import annotations

import json
import re

from worker.formats.base import ParsedOutput, PartialCall
from worker.formats.tagged import TaggedCallFormat, parse_tagged, partial_tagged
from worker.grammar import literal

# An odd run of backslashes before "_": the last one is a markdown escape. An even run is
# escaped backslashes (valid JSON "\\_") and is left alone.
_ESCAPED_UNDERSCORE = re.compile(r"(?<!\\)((?:\\\\)*)\\_")


def unescape_underscores(text: str) -> str:
    """Undo Mixtral's ``\\_``. Only touches text that was invalid JSON ("\\_" is no JSON escape)."""
    return _ESCAPED_UNDERSCORE.sub(r"\1_", text)


def _with_optional_escapes(text: str) -> str:
    """GBNF matching text where each '_' may be written '\\_'."""
    parts = text.split("_")
    pieces = []
    for i, part in enumerate(parts):
        if part:
            pieces.append(literal(part))
        if i < len(parts) - 1:
            pieces.append('"\\\\"? "_"')
    return " ".join(pieces) if pieces else '""'


class MixtralFormat(TaggedCallFormat):
    name = "mixtral"
    # The shortest text both spellings of the tag start with; the call grammar starts here.
    trigger = "<tool"

    def _tag(self, tag: str) -> str:
        return _with_optional_escapes(tag)

    def _name_literal(self, name: str) -> str:
        # The name is a JSON string; escape it as JSON first, then let underscores be escaped.
        return _with_optional_escapes(json.dumps(name, ensure_ascii=False))

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        if isinstance(text, str):
            text = unescape_underscores(text)
        return parse_tagged(text, tool_names, self.open_tag, self.close_tag)

    def openers(self, tool_names: set[str]) -> tuple[str, ...]:
        return (*super().openers(tool_names), self.open_tag.replace("_", "\\_"))

    def partial_calls(self, text: str) -> list[PartialCall]:
        # the grammar escapes underscores only in the tags and the name, never in arguments
        return partial_tagged(
            text.replace("<tool\\_call>", self.open_tag),
            self.open_tag,
            self.close_tag,
            lambda raw: json.loads(unescape_underscores(raw)),
        )


FORMAT = MixtralFormat()
