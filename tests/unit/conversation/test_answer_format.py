"""response_format in the loop (worker/answer_format.py): the answer grammar, the retry of a free
answer under it, the schema check, and the caller's stop sequences."""

from __future__ import annotations

import pytest

from tests.unit.conversation.test_loop import Sink, make_loop, req
from toolq.tools import ToolRegistry
from toolq.wire.protocol import JobRequest, ResponseFormat
from worker.answer_format import AnswerFormatError, answer_grammar, answer_problem
from worker.grammar import check_grammar

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "n": {"type": "integer", "minimum": 3}},
    "required": ["city", "n"],
}
FMT = ResponseFormat(type="json_schema", json_schema=SCHEMA)


def test_grammars_are_checked_and_answers_validated():
    check_grammar(answer_grammar(FMT))
    check_grammar(answer_grammar(ResponseFormat(type="json_object")))
    assert answer_problem(FMT, '{"city": "Oslo", "n": 4}') is None
    assert "minimum" in (answer_problem(FMT, '{"city": "Oslo", "n": 1}') or "")
    assert "not valid JSON" in (answer_problem(ResponseFormat(type="json_object"), "hello") or "")


def test_a_response_format_needs_a_valid_schema():
    with pytest.raises(ValueError, match="needs its schema"):
        ResponseFormat(type="json_schema")
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        ResponseFormat(type="json_schema", json_schema={"type": 5})


async def test_without_tools_the_answer_round_is_constrained():
    loop, engine = make_loop(ToolRegistry(), ['{"city": "Oslo", "n": 4}'])
    out = await loop.run(req("city?", tools=[], response_format=FMT), Sink())
    assert out.content == '{"city": "Oslo", "n": 4}' and out.finish_reason == "stop"
    assert engine.requests[0].grammar == answer_grammar(FMT) and engine.requests[0].grammar_trigger is None


async def test_a_free_answer_while_tools_were_offered_is_written_again_under_the_grammar():
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    loop, engine = make_loop(reg, ["Oslo, I think.", '{"city": "Oslo", "n": 5}'])
    out = await loop.run(req("city?", tools=["add"], response_format=FMT), Sink())
    assert out.content == '{"city": "Oslo", "n": 5}'
    assert engine.requests[1].grammar == answer_grammar(FMT) and len(engine.requests) == 2


async def test_an_answer_that_still_breaks_the_schema_is_an_error():
    loop, _ = make_loop(ToolRegistry(), ['{"city": "Oslo", "n": 1}'])
    with pytest.raises(AnswerFormatError, match="minimum"):
        await loop.run(req("city?", tools=[], response_format=FMT), Sink())


async def test_the_callers_stop_sequences_reach_the_engine():
    loop, engine = make_loop(ToolRegistry(), ["one two STOP three"])
    out = await loop.run(JobRequest.model_validate({**req("x").model_dump(), "tools": [], "stop": ["STOP"]}), Sink())
    assert out.content == "one two" and "STOP" in engine.requests[0].stop
