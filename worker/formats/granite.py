"""IBM Granite 3.x: ``<|tool_call|>`` then a JSON array of ``{"name", "arguments"}`` calls.
(Granite 4 writes Hermes ``<tool_call>`` tags: the hermes format.)"""

from __future__ import annotations

import re

from worker.formats.marked import MarkedJsonFormat


class GraniteFormat(MarkedJsonFormat):
    name = "granite"
    trigger = "<|tool_call|>"
    head = re.compile(r"<\|tool_call\|>")
    named = False
    open = "<|tool_call|>"
    noise = ("<|end_of_text|>",)


FORMAT = GraniteFormat()
