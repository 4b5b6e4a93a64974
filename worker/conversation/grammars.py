"""The grammar a round is generated under, and its lazy trigger.

Required (``tool_choice`` required or named, first round): the whole output is calls. Auto: free
text, then a lazy grammar from the format's opening tag on. With ``parallel_tool_calls`` off and a
trigger, the grammar is one call (``call_grammar``). A round without tools is free text, or the
answer grammar of ``response_format`` (``worker/answer_format.py``).

Building and checking a grammar takes ~10 ms and a tool set's grammar never changes, so tool
grammars are cached per (format, tools, mode). A caller's schema can make one much larger, so each
is built off the event loop within the worker's budget (worker/grammar/budget.py).
"""

from __future__ import annotations

import json

from toolq.protocol import JobRequest, ResponseFormat
from worker.answer_format import answer_grammar
from worker.formats.base import ToolCallFormat, ToolDefinition
from worker.grammar.budget import GrammarBudget, build

GRAMMAR_CACHE = 256  # distinct (tool set, mode) grammars kept

# (GBNF grammar, lazy trigger): None, None is free text
Constraint = tuple[str | None, str | None]


class ToolGrammars:
    """Tool-call grammars, built once per (format, tools, mode), and answer grammars; each built
    off the event loop within ``budget``."""

    def __init__(self, size: int = GRAMMAR_CACHE, budget: GrammarBudget | None = None):
        self.size = size
        self.budget = budget or GrammarBudget()
        self._built: dict[tuple[str, str, bool], str] = {}

    async def answer(self, fmt: ResponseFormat) -> str:
        """The grammar of an answer in the response format (worker/answer_format.py)."""
        return await build(lambda: answer_grammar(fmt), self.budget, "the response format's grammar")

    async def answer_constraint(self, request: JobRequest) -> Constraint:
        """A round without tools: the answer, free or in the request's response format."""
        return (await self.answer(request.response_format) if request.response_format else None), None

    async def constraint(
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
            grammar = await build(
                (lambda: fmt.call_grammar(tools)) if single else (lambda: fmt.grammar(tools, required=True)),
                self.budget,
                "the tools' grammar",
            )
            self._built[key] = grammar
            while len(self._built) > self.size:
                self._built.pop(next(iter(self._built)))
        return grammar, (None if required else fmt.trigger)
