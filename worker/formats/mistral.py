"""Mistral ``[TOOL_CALLS]``: a JSON array of calls (Nemo, Small 3.x), or ``NAME[ARGS]{...}`` per call
(Devstral, Ministral 3, Magistral: the v11 tokenizer).

Both parsers read both forms (and Small 3.2's ``NAME[CALL_ID]id[ARGS]{...}``); the format named
for a template writes, and constrains, the form that template renders.
"""

from __future__ import annotations

import re

from worker.formats.marked import MarkedJsonFormat

_HEAD = re.compile(r"\[TOOL_CALLS\]\s*(?:(?P<name>[^\[\]{}\s]+)\s*(?:\[CALL_ID\][^\[]*)?\[ARGS\])?")


class MistralFormat(MarkedJsonFormat):
    name = "mistral"
    trigger = "[TOOL_CALLS]"
    head = _HEAD
    named = False
    open = "[TOOL_CALLS]"
    noise = ("</s>",)


class MistralArgsFormat(MarkedJsonFormat):
    name = "mistral_args"
    trigger = "[TOOL_CALLS]"
    head = _HEAD
    open = "[TOOL_CALLS]"
    mid = "[ARGS]"
    noise = ("</s>",)


FORMAT = MistralFormat()
FORMAT_ARGS = MistralArgsFormat()
