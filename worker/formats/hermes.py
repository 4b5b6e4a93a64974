"""Hermes tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The default format (NousResearch Hermes 2 Pro / Hermes 3, Qwen and most ChatML tool models).
Results go back as ``<tool_response>...</tool_response>``. The prompts, parser, grammar and
rendering are worker/formats/tagged.py's, shared with the Mixtral spelling of the same tags.
"""

from __future__ import annotations

from worker.formats.tagged import TaggedCallFormat


class HermesFormat(TaggedCallFormat):
    name = "hermes"


FORMAT = HermesFormat()
