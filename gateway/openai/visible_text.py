"""Which part of a job's streamed token text is answer text a caller may see as it arrives.

Token events carry the model's raw output, tool-call markup included. With tools offered, a
turn's text is shown up to the first character that can open a tool call in any of toolq's
formats (``<``, ``[`` or ``{``: ``<tool_call>``, ``[TOOL_CALLS]``, a bare JSON reply); the rest
waits for the final event, which says what was content and what was calls. A tool result (a
served tool, in the full loop) starts a new turn.
"""

from __future__ import annotations

HOLD = "<[{"


class VisibleText:
    def __init__(self, *, tools_offered: bool):
        self.hold = tools_offered
        self.turn = ""  # the text of the turn so far
        self.sent = 0  # how much of it was shown

    def add(self, text: str) -> str:
        """Add streamed text; returns what may be shown now (may be empty)."""
        self.turn += text
        end = len(self.turn)
        if self.hold:
            cut = [i for i in (self.turn.find(c) for c in HOLD) if i >= 0]
            end = min(cut, default=end)
        if end <= self.sent:
            return ""
        out, self.sent = self.turn[self.sent : end], end
        return out

    def new_turn(self) -> None:
        self.turn, self.sent = "", 0

    def rest(self, content: str) -> str:
        """What the final content adds to what was shown of this turn."""
        shown = self.turn[: self.sent]
        return content[len(shown) :] if content.startswith(shown) else ""

    @property
    def shown(self) -> str:
        return self.turn[: self.sent]
