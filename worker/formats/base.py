"""What every tool-call format gives the loop: a system prompt, a grammar and a parser.

A format is one module under worker/formats/ that defines ``FORMAT``, an instance of a
ToolCallFormat subclass, and a row in the ``FORMATS`` table of worker/formats/__init__.py.
Tools are passed in the OpenAI function shape:
``{"type": "function", "function": {"name", "description", "parameters"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolq.wire.protocol import ToolCall

# An OpenAI function definition, {"type": "function", "function": {"name", "description", "parameters"}}:
# what a format renders into its system prompt and builds grammars from. (toolq.wire.api.ToolSpec is
# the gateway's view of a served tool, a different thing.)
ToolDefinition = dict[str, Any]


@dataclass
class PartialCall:
    """A call as far as it is written: its name, and its arguments JSON so far (only ever
    growing); ``done`` once the call is complete. ``name_done`` False: the call has begun but its
    name is still being written, and ``name`` is what is written of it, maybe "" (``arguments``
    is empty then); under a grammar, which writes only offered names, a beginning that only one
    offered name has already says which (worker/formats/streaming.py)."""

    name: str
    arguments: str
    done: bool
    name_done: bool = True


@dataclass
class ParsedOutput:
    """What a parser found in raw model text. Parsers never raise; problems go in ``errors``."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # True when the text ends inside an unfinished call (cut by max_tokens, say).
    truncated_call: bool = False


class ToolCallFormat:
    name: str = ""
    # Text that opens a call: the lazy grammar starts when the model writes it (None: no lazy mode).
    trigger: str | None = None
    # Stop strings the engine should stop on for this format (besides the template's end of turn).
    stop: Sequence[str] = ()
    # Streaming (worker/formats/streaming.py): characters that open a call when they start a line
    # (a bare JSON call), and whether every reply may be a call from its first character (a
    # format with no opening mark: nothing is answer text until the whole reply is read).
    line_openers: str = ""
    opens_at_start: bool = False

    def system_prompt(self, tools: Sequence[ToolDefinition], variant: str | None = None) -> str:
        """The text that teaches the model the format and lists the tools."""
        raise NotImplementedError

    def grammar(self, tools: Sequence[ToolDefinition], *, required: bool = False) -> str:
        """GBNF constraining output to valid calls of exactly these tools.

        required=False: free text, then any number of calls (``content* tool-call*``).
        required=True: the output is one or more calls and nothing else.
        """
        raise NotImplementedError

    def call_grammar(self, tools: Sequence[ToolDefinition]) -> str:
        """GBNF for the text from ``trigger`` on: used as a lazy grammar in auto mode."""
        raise NotImplementedError

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        """Split raw model text into content, tool calls and readable errors; never raises."""
        raise NotImplementedError

    def openers(self, tool_names: set[str]) -> tuple[str, ...]:
        """The marks that may open a call in this format's output; answer text streams up to the
        first of them. ``tool_names``: the offered tools (some forms count only for them)."""
        return (self.trigger,) if self.trigger else ()

    def partial_calls(self, text: str) -> list[PartialCall]:
        """The calls ``text`` holds as far as they are written, in order; ``text`` starts where
        the calls do and was written under this format's grammar. This default gives each call
        whole, once another call follows it (a parser may read a call still being written as
        complete, its end being the end of the text): the last call of a turn comes from the
        final event. A format that can say more sooner overrides it."""
        calls = self.parse(text).tool_calls[:-1]
        return [PartialCall(c.name, json.dumps(c.arguments, ensure_ascii=False), True) for c in calls]

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        """The calls written inline, as the model would write them (for templates without
        tool_calls support, and for a transcript)."""
        raise NotImplementedError

    def render_final(self, content: str) -> str:
        """An earlier final answer as this format writes answers (plain text for most formats)."""
        return content

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        """A tool result as the model expects to read it (``<tool_response>`` for Hermes)."""
        raise NotImplementedError
