"""What a build process runs (worker/grammar/pool.py): module-level functions, sent by name, that
build one grammar each. Nothing here imports the engine."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from worker.grammar.builder import GrammarBuilder

if TYPE_CHECKING:
    from worker.formats.base import ToolCallFormat

__all__ = ["schema_grammar_text", "tool_grammar"]


def tool_grammar(fmt: ToolCallFormat, tools: Sequence[dict[str, Any]], single: bool) -> str:
    """The tools' grammar in a format: one call from its trigger on, or the whole output as calls."""
    return fmt.call_grammar(tools) if single else fmt.grammar(tools, required=True)


def schema_grammar_text(schema_json: str) -> str:
    """GBNF for one JSON value of the schema (given as JSON); checked."""
    builder = GrammarBuilder()
    rule = builder.schema(json.loads(schema_json), "answer")
    builder.add("root", rule)
    return builder.render()
