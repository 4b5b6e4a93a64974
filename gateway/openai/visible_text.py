"""Which part of a job's streamed token text is answer text a caller may see as it arrives.

A worker that classifies its token stream (worker/formats/streaming.py) sends each token event's
answer text in ``content``: text the active tool-call format cannot read as the start of a call,
``<``, ``[`` and ``{`` included, as soon as it is written. That is what is shown.

A token event without ``content`` (a worker that predates the field) is shown by the old rule:
with tools offered, a turn's text up to the first character that can open a tool call in any of
toolq's formats (``<``, ``[`` or ``{``); the rest waits for the final event, which says what was
content and what was calls. A tool result (a served tool, in the full loop) starts a new turn.
"""

from __future__ import annotations

from toolq.wire.payloads import TokenData
from toolq.wire.protocol import JobRequest

HOLD = "<[{"


class VisibleText:
    def __init__(self, *, tools_offered: bool):
        self.hold = tools_offered
        self.turn = ""  # the text of the turn so far
        self.sent = 0  # how much of it was shown

    @classmethod
    def of(cls, job: JobRequest) -> VisibleText:
        """The answer text of a job's stream: tools are offered unless there are none or
        tool_choice is none."""
        return cls(tools_offered=bool(job.tools) and job.tool_choice != "none")

    def add_token(self, data: TokenData) -> str:
        """What a token event's data lets the caller see now (may be empty)."""
        if data.content is not None:
            shown = data.content
            self.turn = self.turn[: self.sent] + shown
            self.sent = len(self.turn)
            return shown
        return self.add(data.text)

    def add(self, text: str) -> str:
        """Add streamed raw text (the old rule); returns what may be shown now (may be empty)."""
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
        """What the final content adds to what was shown of this turn (the final content is
        stripped, the stream is not)."""
        shown = self.shown.lstrip()
        return content[len(shown) :] if content.startswith(shown) else ""

    @property
    def shown(self) -> str:
        return self.turn[: self.sent]
