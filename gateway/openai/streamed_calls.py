"""Which of a job's streamed call deltas reach the caller of an OpenAI endpoint, and under which
index: the token events' ``calls`` (worker/formats/streaming.py) of the caller's own functions.

A served tool's call runs in the worker's loop and never reaches the caller. The worker numbers
calls within one turn (one generation); a stream numbers them over the whole answer, in the
order their first delta arrives. The ids of streamed calls are the ids of the final event's
calls, so the final event sends only the calls not streamed.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolq.wire.payloads import TokenData
from toolq.wire.protocol import FunctionTool, JobRequest


@dataclass
class CallPiece:
    """One delta for the caller: the stream's index; on a call's first piece its id and name."""

    index: int
    id: str | None
    name: str | None
    arguments: str


class StreamedCalls:
    def __init__(self, job: JobRequest):
        tools = job.tools or ()
        self.names = {t.function.name for t in tools if isinstance(t, FunctionTool) and t.execution == "client"}
        self.turn = 0
        self.index: dict[tuple[int, int], int] = {}  # (turn, the worker's index) -> the stream's index
        self.ids: list[str] = []  # by the stream's index

    def new_turn(self) -> None:
        """A tool result: the worker's indexes start again."""
        self.turn += 1

    def read(self, token: TokenData) -> list[CallPiece]:
        """The pieces of a token event's data that the caller sees."""
        out = []
        for delta in token.calls or ():
            key = (self.turn, delta.index)
            if delta.id is not None:
                if delta.name not in self.names:
                    continue
                self.index[key] = len(self.ids)
                self.ids.append(delta.id)
                out.append(CallPiece(self.index[key], delta.id, delta.name, delta.arguments))
            elif key in self.index and delta.arguments:
                out.append(CallPiece(self.index[key], None, None, delta.arguments))
        return out

    def streamed(self, call_id: str) -> int | None:
        """The stream's index of a call already streamed, else None."""
        return self.ids.index(call_id) if call_id in self.ids else None
