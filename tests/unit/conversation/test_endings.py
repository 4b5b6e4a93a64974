"""How an attempt ends (worker/endings.py): a pure function of the stop cause, the loop's outcome
and the loop's error."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from store.durability import NotReplicated
from toolq.tools import UnknownToolError
from toolq.wire.protocol import ErrorCode, Message, PendingAction
from worker.conversation import LoopOutcome, LoopState
from worker.endings import Cancelled, Failed, Finished, HandedBack, Paused, StopCause, classify
from worker.generation import ContextLengthExceeded, EngineError
from worker.grammar.errors import GrammarBuildFailed, GrammarDeadEnd, GrammarTooLarge


def outcome(finish: str = "stop", *kinds: str) -> LoopOutcome:
    pending = [
        PendingAction(id=f"c{i}", name="t", kind=kind, where="client" if kind == "client" else "worker")
        for i, kind in enumerate(kinds)
    ]
    return LoopOutcome("done", finish, LoopState(messages=[Message(role="user", content="hi")]), pending)


@pytest.mark.parametrize("cause", [StopCause.superseded, StopCause.shutdown])
def test_a_superseded_or_shut_down_attempt_publishes_nothing_whatever_the_loop_reached(cause):
    assert classify(cause, outcome(), None, on_client_tool="pause") == HandedBack(cause)
    assert classify(cause, None, RuntimeError("x"), on_client_tool="pause") == HandedBack(cause)


@pytest.mark.parametrize("cause", [None, StopCause.cancelled, StopCause.timeout])
def test_an_outcome_the_loop_reached_wins_over_a_late_cancel_or_timeout(cause):
    done = outcome("max_iterations")
    assert classify(cause, done, None, on_client_tool="pause") == Finished(done, "max_iterations")


def test_calls_that_wait_on_the_caller_pause_the_job_unless_the_caller_ends_it_on_client_calls():
    client_only, mixed = outcome("requires_action", "client"), outcome("requires_action", "client", "approval")
    assert classify(None, client_only, None, on_client_tool="pause") == Paused(client_only)
    assert classify(None, client_only, None, on_client_tool="end") == Finished(client_only, "tool_calls")
    assert classify(None, mixed, None, on_client_tool="end") == Paused(mixed)


def test_cancel_and_timeout_without_an_outcome():
    assert classify(StopCause.cancelled, None, None, on_client_tool="pause") == Cancelled()
    ending = classify(StopCause.timeout, None, None, on_client_tool="pause")
    assert isinstance(ending, Failed) and (ending.code, ending.finish_reason) == (ErrorCode.timeout, "timeout")


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (UnknownToolError(["nope"], ["add"]), ErrorCode.unknown_tool, "error"),
        (KeyError("a key deep inside a tool source"), ErrorCode.internal, "error"),  # only UnknownToolError
        (ContextLengthExceeded(900, 512), ErrorCode.context_length_exceeded, "length"),
        (EngineError("decode failed"), ErrorCode.engine_error, "error"),
        (GrammarTooLarge("past the budget"), ErrorCode.grammar_too_large, "error"),
        (GrammarDeadEnd("no token fits"), ErrorCode.grammar_dead_end, "error"),
        (GrammarBuildFailed("cannot be built"), ErrorCode.engine_error, "error"),
        (None, ErrorCode.internal, "error"),
    ],
)
def test_errors_are_typed_by_their_class(error, code, reason):
    ending = classify(None, None, error, on_client_tool="pause")
    assert isinstance(ending, Failed) and (ending.code, ending.finish_reason) == (code, reason)
    if error is not None and code is not ErrorCode.internal:
        assert ending.message == str(error)
    if isinstance(error, UnknownToolError):
        assert "'nope'" in ending.message and "add" in ending.message


@pytest.mark.parametrize(
    "error",
    [
        NotReplicated("event 4 (tool_call)", job_id="job_x", acked=0, wanted=1, timeout_ms=500),
        RedisConnectionError("no primary"),
    ],
)
def test_a_store_that_failed_the_attempt_hands_it_back_instead_of_ending_the_job(error):
    # store/durability.py: the tools did not run; an attempt on the primary of now goes on
    assert classify(None, None, error, on_client_tool="pause") == HandedBack(StopCause.store_lost)
