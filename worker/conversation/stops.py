"""Checks that end a generation early, run by the engine on the text so far."""

from __future__ import annotations

from collections.abc import Callable

from worker.conversation.transcript import without_repeats
from worker.formats.base import ToolCallFormat


def repeat_check(fmt: ToolCallFormat, names: set[str]) -> Callable[[str], bool]:
    """Stop a turn as soon as it holds the same call (name and arguments) twice.

    Small models repeat a call until max_tokens, and the repeats are dropped anyway
    (``transcript.without_repeats``), so every token after the second copy is wasted decode time.
    The text is parsed again only when its newest piece can close a call (``}``, ``>`` or ``]``).
    """
    seen = 0

    def check(text: str) -> bool:
        nonlocal seen
        tail, seen = text[seen:], len(text)
        if not any(ch in tail for ch in "}>]"):
            return False
        calls = fmt.parse(text, names).tool_calls
        return len(without_repeats(calls)) < len(calls)

    return check
