"""A state copied out of llama.cpp, or set back into it, in pieces between decode steps, so that
neither holds up the other slots for more than about half a step.

Copying a sequence out is synchronous on the decode thread, and every other slot's next token
waits for it. One copy of a whole 4,000-token state (92 MB on SmolLM2-135M) took 13.7 ms here,
where a decode step beside it took 9.6 ms: a stall of 1.4 steps (bench/bench_resume.py). So a
state is copied a range of positions at a time (llama_state.py), as much between two steps as fits
in half of a recent step, at least one range.

The slot being saved is held until the last piece is out: a prompt that would overwrite its cells
waits (a few steps); one that only appends to them (the same conversation's next round) may run,
since the ranges being copied are the positions the save started with. When nothing is decoding,
nobody waits, and the whole state is copied at once.

A restore sets the saved pieces back the same way, as many between two steps as fit in half a
step by the rate the last went at; its sequence joins the steps once the last piece is in.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.engine.tiers.llama_state import copy_range, frames, set_piece, state_size

PIECE_TOKENS = 512  # a piece of a state: at most this many positions (about 0.7 ms here on SmolLM2)
MIN_PIECE = 32  # and at least this many, unless fewer are left (each piece walks every cell's metadata)
PIECE_ROOM = 16 << 10  # bytes a piece may take beyond its share of the whole state (its own headers)


def room(n_tokens: int, whole_bytes: int, piece_tokens: int = PIECE_TOKENS) -> int:
    """A buffer that holds a state of ``whole_bytes`` (as one piece) copied in pieces."""
    return whole_bytes + (n_tokens // max(1, piece_tokens) + 1) * PIECE_ROOM


@dataclass
class PiecewiseSave:
    """One slot's state being copied out, the positions the save began with."""

    seq_id: int
    tokens: list[int]
    buf: bytearray
    piece_tokens: int = PIECE_TOKENS
    at: int = 0  # bytes written
    pos: int = 0  # the next position to copy
    per_token: float | None = None  # seconds a position took in the last piece
    started_at: int = 0  # where this call's pieces began

    @classmethod
    def begin(
        cls,
        ctx: Any,
        seq_id: int,
        tokens: list[int],
        ready: Callable[[int], bytearray | None] | None,
        piece_tokens: int,
    ) -> PiecewiseSave | None:
        """A save of the sequence's cells, positions 0 .. len(tokens)-1, into a ready buffer
        (spare.py) where ``ready`` gives one, else into one that grows a piece at a time (a whole
        fresh buffer is zeroed at once, holding the GIL: tens of ms for a long state); None when
        llama.cpp holds nothing for it."""
        whole = state_size(ctx, seq_id)
        if whole == 0 or not tokens:
            return None
        buf = (ready(room(len(tokens), whole, piece_tokens)) if ready is not None else None) or bytearray()
        return cls(seq_id, list(tokens), buf, max(1, piece_tokens))

    @property
    def done(self) -> bool:
        return self.pos >= len(self.tokens)

    def copy(self, ctx: Any, spare_id: int, budget_s: float) -> float:
        """Copy pieces that fit in ``budget_s``, at least one; the seconds spent. A piece's size
        follows the rate the last one was copied at (page faults of a growing buffer included),
        between MIN_PIECE and ``piece_tokens`` positions; the first is MIN_PIECE, to learn it."""
        t0 = time.perf_counter()
        while not self.done:
            left = budget_s - (time.perf_counter() - t0)
            if self.per_token is None:
                n = MIN_PIECE
            elif left == float("inf"):
                n = self.piece_tokens
            else:
                n = int(left / self.per_token) if left > 0 else 0
                if n < MIN_PIECE:
                    if self.pos > self.started_at:
                        break  # the next piece would overrun: after the next step
                    n = MIN_PIECE  # at least one piece a call
            n = max(1, min(n, self.piece_tokens, len(self.tokens) - self.pos))
            t1 = time.perf_counter()
            self.at = copy_range(ctx, self.seq_id, spare_id, self.pos, self.pos + n, self.buf, self.at)
            self.pos += n
            self.per_token = (time.perf_counter() - t1) / n
        self.started_at = self.pos
        return time.perf_counter() - t0

    def payload(self) -> bytearray:
        """The framed pieces (llama_state.py), the buffer trimmed to them; once ``done``."""
        del self.buf[self.at :]
        return self.buf


@dataclass
class PiecewiseRestore:
    """A saved state being set into a sequence, its pieces in order."""

    seq_id: int
    payload: bytearray
    spans: list[tuple[int, int]]
    tokens: list[int]  # what the sequence holds once every piece is in
    source: str  # the tier it came from
    next: int = 0  # the next piece to set
    per_byte: float | None = None  # seconds a byte took in the last piece
    failed: bool = False

    @classmethod
    def begin(cls, seq_id: int, payload: bytearray, tokens: list[int], source: str) -> PiecewiseRestore | None:
        """None when the payload's framing is broken (then nothing is set)."""
        try:
            spans = frames(payload)
        except ValueError:
            return None
        return cls(seq_id, payload, spans, tokens, source) if spans else None

    @property
    def done(self) -> bool:
        return self.failed or self.next >= len(self.spans)

    def restore(self, ctx: Any, spare_id: int, budget_s: float) -> float:
        """Set pieces that fit in ``budget_s``, at least one; the seconds spent. ``failed`` once
        llama.cpp refused one (the caller clears the sequence)."""
        t0 = time.perf_counter()
        first_here = True
        while not self.done:
            span = self.spans[self.next]
            if not first_here and self.per_byte is not None:
                if time.perf_counter() - t0 + self.per_byte * span[1] > budget_s:
                    break
            first_here = False
            t1 = time.perf_counter()
            if not set_piece(ctx, self.seq_id, spare_id, self.payload, span, first=self.next == 0):
                self.failed = True
                break
            self.next += 1
            self.per_byte = (time.perf_counter() - t1) / span[1]
        return time.perf_counter() - t0


@dataclass
class StepPace:
    """How long the copy may run between two steps: half of a recent decode step."""

    share: float = 0.5
    steps: deque[float] = field(default_factory=lambda: deque(maxlen=32))

    def stepped(self, seconds: float) -> None:
        self.steps.append(seconds)

    def budget(self, decoding: bool) -> float:
        if not decoding:
            return float("inf")  # nobody waits on the copy
        if not self.steps:
            return 0.0  # one piece
        return self.share * statistics.median(self.steps)
