"""OpenAI gpt-oss (harmony): ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>``.

The recipient may also come before the channel (``to=functions.NAME<|channel|>commentary json``,
as the template renders past calls). Reasoning (the ``analysis`` channel) is dropped; the answer
is the ``final`` channel's text.
"""

from __future__ import annotations

import re

from worker.formats.base import ParsedOutput
from worker.formats.marked import MarkedJsonFormat

_ANALYSIS = re.compile(r"<\|channel\|>\s*analysis\s*<\|message\|>.*?(?:<\|end\|>|$)", re.DOTALL)
_MARKUP = re.compile(
    r"<\|start\|>\s*assistant|<\|channel\|>\s*\w+\s*(?:<\|constrain\|>\s*\w+\s*)?<\|message\|>|<\|(?:end|return|call)\|>"
)


class GptOssFormat(MarkedJsonFormat):
    name = "gpt_oss"
    trigger = "<|channel|>commentary to=functions."
    head = re.compile(
        r"(?:<\|start\|>\s*assistant\s*)?(?:<\|channel\|>\s*commentary\s*)?to=functions\.(?P<name>[^\s<]+)\s*"
        r"(?:<\|channel\|>\s*commentary\s*)?(?:<\|constrain\|>\s*)?(?:json\s*)?<\|message\|>"
    )
    open = "<|channel|>commentary to=functions."
    mid = " <|constrain|>json<|message|>"
    close = "<|call|>"
    separator = "<|start|>assistant"
    stop = ("<|call|>",)

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        return super().parse(_ANALYSIS.sub("", text) if isinstance(text, str) else str(text), tool_names)

    def clean_content(self, content: str) -> str:
        return _MARKUP.sub("", content).strip()


FORMAT = GptOssFormat()
