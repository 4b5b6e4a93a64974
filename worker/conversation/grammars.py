"""The grammar a round is generated under, and its lazy trigger.

Required (``tool_choice`` required or named, first round): the whole output is calls. Auto: free
text, then a lazy grammar from the format's opening tag on. With ``parallel_tool_calls`` off and a
trigger, the grammar is one call (``call_grammar``). A round without tools is free text, or the
answer grammar of ``response_format`` (``worker/answer_format.py``).

A tool set's grammar never changes, and a caller's schema can make one large and slow to build:
each is built in a build process within the worker's budget, once, and a failure is remembered
and refused at once (worker/grammar/builds.py).
"""

from __future__ import annotations

from toolq.wire.protocol import JobRequest, ResponseFormat
from worker.answer_format import answer_schema_json
from worker.formats.base import ToolCallFormat, ToolDefinition
from worker.grammar.budget import GrammarBudget
from worker.grammar.builds import GRAMMAR_CACHE, GrammarBuilds
from worker.grammar.tasks import schema_grammar_text, tool_grammar

# (GBNF grammar, lazy trigger): None, None is free text
Constraint = tuple[str | None, str | None]


class ToolGrammars:
    """Tool-call grammars, built once per (format, tools, mode), and answer grammars; each built
    in a build process within ``budget``."""

    def __init__(self, size: int = GRAMMAR_CACHE, budget: GrammarBudget | None = None):
        self.builds = GrammarBuilds(budget, size=size)
        self.budget = self.builds.budget

    async def answer(self, fmt: ResponseFormat) -> str:
        """The grammar of an answer in the response format (worker/answer_format.py)."""
        schema = answer_schema_json(fmt)
        return await self.builds.get(
            ["answer", schema], schema_grammar_text, (schema,), "the response format's grammar"
        )

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
        grammar = await self.builds.get(
            ["tools", fmt.name, tools, single], tool_grammar, (fmt, tools, single), "the tools' grammar"
        )
        return grammar, (None if required else fmt.trigger)
