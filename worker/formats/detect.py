"""Which tool-call format a chat template teaches, read from its source (``--format auto``).

A template that renders tool calls writes them in its family's markup, so the markup names the
format, as llama.cpp's common/chat.cpp finds it. The worker uses the answer with ``--template
gguf`` (worker/app.py); an unknown template gets the default format, with a warning.
"""

from __future__ import annotations

HERMES_SIGNATURE = "<tool_call>"


def detect_format(template_source: str) -> str | None:
    """The name of the format (a key of ``worker.formats.FORMATS``) whose markup this template
    source writes, or None when no known signature is in it."""
    if HERMES_SIGNATURE in template_source:
        return "hermes"
    return None
