"""Llama 3.1 to 3.3: a bare ``{"name": ..., "parameters": {...}}`` object, or one after ``<|python_tag|>``.

Bare JSON is a call only when it names an offered tool; any other JSON stays content. Several
calls in one turn (which the templates refuse to render) are read one per line or ``;``-separated. (The
built-in tools' ``<|python_tag|>brave_search.call(query=...)`` form is not read: toolq offers
no built-in tools.)
"""

from __future__ import annotations

import re

from worker.formats.marked import MarkedJsonFormat


class Llama3Format(MarkedJsonFormat):
    name = "llama3"
    trigger = '{"name"'
    # the tag, the start of the output, or a ";" or newline right after a call: the next call
    head = re.compile(r"<\|python_tag\|>|^\s*(?=[{\[])|(?<=\})[ \t]*[;\n]\s*(?=\{)")
    named = False
    bare = True
    array = False
    args_key = "parameters"
    separator = "\n"
    noise = ("<|eom_id|>", "<|eot_id|>")
    line_openers = "{["  # the bare call object the head reads at the start

    def openers(self, tool_names: set[str]) -> tuple[str, ...]:
        return ("<|python_tag|>", self.trigger)


FORMAT = Llama3Format()
