"""How one attempt of a job ends, decided in one pure function (``classify``) from what stopped it
(``StopCause``) and what the loop left (an outcome or an error). ``worker/jobrun.py`` then carries
the ending out: publish it, park the job, or hand it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from store.durability import NotReplicated
from store.errors import RedisError
from toolq.tools import UnknownToolError
from toolq.wire.protocol import ErrorCode, FinishReason
from worker.conversation import LoopOutcome
from worker.generation import ContextLengthExceeded, EngineError
from worker.grammar.errors import GrammarDeadEnd, GrammarTooLarge


class StopCause(str, Enum):
    """Why a running attempt was interrupted before its loop ended on its own."""

    cancelled = "cancelled"  # its caller cancelled the job: it ends cancelled
    timeout = "timeout"  # it ran past its deadline: it ends with the timeout error
    superseded = "superseded"  # another attempt took the job over: this one publishes nothing
    shutdown = "shutdown"  # the worker is stopping: the job is handed back to the queue
    budget_exceeded = "budget_exceeded"  # it passed its per-job token cap (worker/budget.py)
    # Redis failed it: unreachable past the retries, or a write it needed replicated was not
    # (store/durability.py). Handed back: an attempt on the primary of now goes on.
    store_lost = "store_lost"


@dataclass(frozen=True)
class HandedBack:
    """Nothing is published: another attempt goes on from the checkpoint."""

    cause: Literal[StopCause.superseded, StopCause.shutdown, StopCause.store_lost]


@dataclass(frozen=True)
class Paused:
    """The loop waits on its caller (``outcome.pending``): the job is parked until answered."""

    outcome: LoopOutcome


@dataclass(frozen=True)
class Finished:
    """The ``final`` event. ``tool_calls``: client calls left for a caller that runs them itself."""

    outcome: LoopOutcome
    finish_reason: FinishReason


@dataclass(frozen=True)
class Cancelled:
    """The ``cancelled`` event."""


@dataclass(frozen=True)
class Failed:
    """The ``error`` event."""

    code: ErrorCode
    message: str
    finish_reason: FinishReason


Ending = HandedBack | Paused | Finished | Cancelled | Failed


def classify(
    cause: StopCause | None,
    outcome: LoopOutcome | None,
    error: BaseException | None,
    *,
    on_client_tool: Literal["pause", "end"],
) -> Ending:
    """The ending of an attempt. An outcome the loop reached wins over a cancel or a timeout that
    came too late to stop it; a superseded or shut-down attempt publishes nothing at all."""
    if cause is StopCause.superseded:
        return HandedBack(StopCause.superseded)
    if cause is StopCause.shutdown:
        return HandedBack(StopCause.shutdown)
    if cause is StopCause.budget_exceeded:  # even with an outcome: its last round crossed the cap
        return Failed(ErrorCode.budget_exceeded, "the job passed its per-job token cap", "error")
    if outcome is not None:
        if outcome.finish_reason != "requires_action":
            return Finished(outcome, outcome.finish_reason)
        if on_client_tool == "end" and all(p.kind == "client" for p in outcome.pending):
            return Finished(outcome, "tool_calls")  # the caller runs them and sends a new job
        return Paused(outcome)
    if cause is StopCause.cancelled:
        return Cancelled()
    if cause is StopCause.timeout:
        return Failed(ErrorCode.timeout, "the job ran past its timeout and was stopped", "timeout")
    if isinstance(error, (NotReplicated, RedisError)):
        return HandedBack(StopCause.store_lost)
    return failure(error)


def failure(error: BaseException | None) -> Failed:
    """The error a loop's exception ends the job with."""
    if error is None:
        return Failed(ErrorCode.internal, "the job stopped without an outcome", "error")
    if isinstance(error, ContextLengthExceeded):
        return Failed(ErrorCode.context_length_exceeded, str(error), "length")
    if isinstance(error, GrammarTooLarge):
        return Failed(ErrorCode.grammar_too_large, str(error), "error")
    if isinstance(error, GrammarDeadEnd):
        return Failed(ErrorCode.grammar_dead_end, str(error), "error")
    if isinstance(error, EngineError):
        return Failed(ErrorCode.engine_error, str(error), "error")
    if isinstance(error, UnknownToolError):
        return Failed(ErrorCode.unknown_tool, str(error), "error")
    return Failed(ErrorCode.internal, f"{type(error).__name__}: {error}", "error")
