"""The grammar a round is generated under, and its lazy trigger.

Required (``tool_choice`` required or named, first round): the whole output is calls. Auto: free
text, then a lazy grammar from the format's opening tag on. With ``parallel_tool_calls`` off and a
trigger, the grammar is one call (``call_grammar``). A round without tools is free text, or the
answer grammar of ``response_format`` (``worker/answer_format.py``).

Building and checking a grammar takes ~10 ms and a tool set's grammar never changes, so tool
grammars are cached per (format, tools, mode).
"""

from __future__ import annotations

import json

from toolq.protocol import JobRequest
from worker.answer_format import answer_grammar
from worker.formats.base import ToolCallFormat, ToolDefinition

GRAMMAR_CACHE = 256  # distinct (tool set, mode) grammars kept

# (GBNF grammar, lazy trigger): None, None is free text
Constraint = tuple[str | None, str | None]


def answer_constraint(request: JobRequest) -> Constraint:
    """A round without tools: the answer, free or in the request's response format."""
    return (answer_grammar(request.response_format) if request.response_format else None), None


class ToolGrammars:
    """Tool-call grammars, built once per (format, tools, mode)."""

    def __init__(self, size: int = GRAMMAR_CACHE):
        self.size = size
        self._built: dict[tuple[str, str, bool], str] = {}

    def constraint(
        self, fmt: ToolCallFormat, tools: list[ToolDefinition], *, required: bool, parallel: bool
    ) -> Constraint:
        if not tools:
            return None, None
        if not required and fmt.trigger is None:
            return None, None  # no opening tag to start a lazy grammar from
        single = not parallel and fmt.trigger is not None
        key = (fmt.name, json.dumps(tools, sort_keys=True), single)
        grammar = self._built.get(key)
        if grammar is None:
            grammar = fmt.call_grammar(tools) if single else fmt.grammar(tools, required=True)
            self._built[key] = grammar
            while len(self._built) > self.size:
                self._built.pop(next(iter(self._built)))
        return grammar, (None if required else fmt.trigger)
