"""One job's rounds of generation: render the conversation, generate under a constraint, count
what it cost, parse the turn, and hold the answer to ``response_format``. Each round is one
``chat`` span (worker/traces.py)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from functools import partial

import structlog

from toolq.wire.protocol import CachedTokens, JobRequest, Usage
from worker import traces
from worker.answer_format import AnswerFormatError, answer_problem
from worker.conversation.grammars import Constraint, ToolGrammars
from worker.conversation.sink import EventSink
from worker.conversation.state import Aborted, LoopState
from worker.conversation.stops import repeat_check
from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition
from worker.formats.streaming import TurnReader, with_streamed_ids
from worker.generation import Engine, GenerationRequest, GenerationResult
from worker.templates import ChatTemplate

log = structlog.get_logger("toolq.loop")


@dataclass
class Rounds:
    engine: Engine
    template: ChatTemplate
    fmt: ToolCallFormat
    prompt_variant: str | None
    request: JobRequest
    state: LoopState
    stop_event: threading.Event
    sink: EventSink
    grammars: ToolGrammars

    async def turn(
        self, tools: list[ToolDefinition], constraint: Constraint, names: set[str]
    ) -> tuple[GenerationResult, ParsedOutput]:
        """One round read with the format (``names``: the tools a call may name)."""
        with traces.chat(self.engine.name, self.request, self.state.iterations + 1):
            gen = await self._generate(tools, constraint)
            with traces.step("parse"):
                return gen, with_streamed_ids(self.fmt.parse(gen.text, names), gen)

    async def generate(self, tools: list[ToolDefinition], constraint: Constraint) -> GenerationResult:
        """One round whose text is taken as it is (an answer written again under its format)."""
        with traces.chat(self.engine.name, self.request, self.state.iterations + 1):
            return await self._generate(tools, constraint)

    async def _generate(self, tools: list[ToolDefinition], constraint: Constraint) -> GenerationResult:
        """The conversation so far with these tools offered; raises Aborted when the job's stop
        flag ended it."""
        request, state = self.request, self.state
        grammar, trigger = constraint
        with traces.step("render"):
            # off the loop: a caller's tools may be a megabyte of schema, and the template walks
            # all of it twice (marked and plain); the worker's heartbeat and every other job's
            # events share this loop
            prompt = await asyncio.to_thread(
                partial(
                    self.template.render,
                    state.messages,
                    tools=tools,
                    fmt=self.fmt,
                    add_generation_prompt=True,
                    prompt_variant=self.prompt_variant,
                )
            )
        state.iterations += 1
        structlog.contextvars.bind_contextvars(iteration=state.iterations)
        # with stream_tokens, the format reads the turn as it is written: answer text and call deltas
        reader = TurnReader.for_generation(self.fmt, tools, grammar, trigger) if request.stream_tokens else None
        started_ns = traces.now_ns()
        gen = await self.engine.generate(
            GenerationRequest(
                segments=prompt.segments,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=request.seed,
                stop=[*self.fmt.stop, *request.stop],
                grammar=grammar,
                grammar_trigger=trigger,
                stop_event=self.stop_event,
                on_text=partial(self.sink.push_text, reader=reader) if reader else None,
                stop_check=repeat_check(self.fmt, {t["function"]["name"] for t in tools}) if tools else None,
            )
        )
        gen.call_id = reader.call_id if reader else None
        traces.generated(gen, self.engine.name, started_ns)
        state.usage.add(
            Usage(
                prompt_tokens=gen.prompt_tokens,
                completion_tokens=gen.completion_tokens,
                cached_prompt_tokens=gen.cached_tokens,
                cached_tokens_by_source=CachedTokens(**gen.cached_by_source) if gen.cached_by_source else None,
            )
        )
        state.generate_ms += gen.prompt_ms + gen.decode_ms
        log.info(
            "generated",
            stop_reason=gen.stop_reason,
            prompt_tokens=gen.prompt_tokens,
            cached_tokens=gen.cached_tokens,
            cached_by_source=gen.cached_by_source or None,
            completion_tokens=gen.completion_tokens,
            decode_tps=round(gen.decode_tps, 1),
            grammar=grammar is not None,
        )
        if gen.stop_reason == "aborted":
            raise Aborted()
        return gen

    async def in_answer_format(
        self, gen: GenerationResult, content: str, offered: list[ToolDefinition]
    ) -> tuple[str, GenerationResult]:
        """The answer, checked against ``response_format``. An answer written freely while tools
        were offered (no grammar could hold both) is written once more under the answer grammar;
        an answer max_tokens cut is returned as it is, with finish_reason ``length``."""
        fmt = self.request.response_format
        if fmt is None or gen.stop_reason == "length" or answer_problem(fmt, content) is None:
            return content, gen
        if offered:
            gen = await self.generate([], (await self.grammars.answer(fmt), None))
            content = gen.text.strip()
            if gen.stop_reason == "length":
                return content, gen
        problem = answer_problem(fmt, content)
        if problem is not None:
            raise AnswerFormatError(problem)
        return content, gen
