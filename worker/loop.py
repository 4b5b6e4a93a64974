"""The conversation loop: render, generate, parse, validate, execute, feed back, repeat.

Pure orchestration over an engine, a chat template, a tool-call format, a tool registry and an
event sink. It knows nothing of Redis or llama.cpp, so unit tests drive it with a scripted engine
and an in-memory sink, and the worker drives it with LlamaEngine and EventLog.

Rules (each has a test in tests/unit/test_loop.py):
- no tool call: the answer; done (``stop``, or ``length`` when max_tokens cut plain text).
- tool calls: one tool_call event per call, validation, execution (calls of a turn run
  concurrently), one tool_result event per call, then the next round.
- unreadable call, unknown tool, invalid arguments, or a call cut off by max_tokens: the model is
  told exactly what was wrong in a tool response and asked to call again; it costs a round.
- the same call (name and arguments) again: not executed; the model is pointed at the result.
  Within one turn, generation stops as soon as a call is written a second time.
- after max_iterations rounds with tools, one last round without tools gives the answer, with
  finish_reason ``max_iterations``.
- tool_choice ``required`` or a named tool constrains the first round of the job to a call (a
  grammar); later rounds are ``auto`` so the model can answer from the results.
- a valid call of a client tool, or of a tool that needs approval, is not run: the loop returns
  ``requires_action`` with the calls it waits on (the other calls of the turn run first). The job
  is resumed with the caller's answers (``LoopState.answers``): results become tool responses,
  approved calls run, denied calls tell the model they were refused.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol

import structlog

from toolq.protocol import JobRequest, Message, PendingAction, ToolCall, Usage, Where
from toolq.tools import ToolOutcome, ToolRegistry
from worker.answer_format import AnswerFormatError, answer_grammar, answer_problem
from worker.formats.base import ToolCallFormat, ToolDefinition
from worker.formats.streaming import TurnReader, with_streamed_ids
from worker.generation import Engine, GenerationRequest, GenerationResult
from worker.sources.registry import RegistrySource
from worker.templates import ChatTemplate
from worker.toolbox import ToolBox, ToolResolver

log = structlog.get_logger("toolq.loop")
_GRAMMAR_CACHE = 256  # distinct (tool set, mode) grammars kept


class EventSink(Protocol):
    async def tool_call(
        self,
        call: ToolCall,
        iteration: int,
        *,
        checkpoint: dict[str, Any] | None = None,
        where: Where = "worker",
        awaiting: str | None = None,
    ) -> Any: ...

    async def tool_result(
        self,
        call: ToolCall,
        *,
        ok: bool,
        content: str,
        error: str | None,
        duration_ms: float,
        executed: bool,
        checkpoint: dict[str, Any],
        where: Where = "worker",
    ) -> Any: ...

    def push_text(self, text: str, reader: TurnReader | None = None) -> None: ...


class Aborted(Exception):
    """The engine stopped because the job's stop flag was set (cancel, timeout, shutdown)."""


@dataclass
class LoopState:
    """Everything needed to continue a job: also what the checkpoint holds."""

    messages: list[Message]
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    generate_ms: float = 0.0
    tools_ms: float = 0.0
    # call id -> "client" | "approval": calls of the last turn that wait on the caller
    awaiting: dict[str, str] = field(default_factory=dict)
    # call id -> the caller's answer, given when a paused job resumes (not checkpointed: once
    # applied, an answer is a tool message in ``messages``). {"content": str} for a client
    # tool, {"approved": bool, "reason": str | None} for an approval.
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def checkpoint(self) -> dict[str, Any]:
        return {
            "messages": [m.model_dump(mode="json", exclude_none=True) for m in self.messages],
            "iterations": self.iterations,
            "usage": self.usage.model_dump(),
            "generate_ms": self.generate_ms,
            "tools_ms": self.tools_ms,
            "awaiting": dict(self.awaiting),
        }

    @classmethod
    def from_checkpoint(cls, data: dict[str, Any]) -> LoopState:
        return cls(
            messages=[Message.model_validate(m) for m in data["messages"]],
            iterations=int(data.get("iterations", 0)),
            usage=Usage.model_validate(data.get("usage", {})),
            generate_ms=float(data.get("generate_ms", 0.0)),
            tools_ms=float(data.get("tools_ms", 0.0)),
            awaiting={str(k): str(v) for k, v in (data.get("awaiting") or {}).items()},
        )


@dataclass
class LoopOutcome:
    content: str
    finish_reason: str  # stop | length | max_iterations | requires_action
    state: LoopState
    pending: list[PendingAction] = field(default_factory=list)  # with requires_action


def call_signature(name: str, arguments: dict[str, Any]) -> str:
    return name + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


def _earlier_results(messages: Sequence[Message]) -> dict[str, str]:
    """Signature of each call already answered in the transcript -> its result."""
    results = {m.tool_call_id: m.content or "" for m in messages if m.role == "tool" and m.tool_call_id}
    out: dict[str, str] = {}
    for m in messages:
        for c in m.tool_calls or ():
            if c.id in results:
                out[call_signature(c.name, c.arguments)] = results[c.id]
    return out


def _without_repeats(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """A call repeated verbatim within one turn is a stutter (small models loop on a call until
    max_tokens); keep the first."""
    seen: set[str] = set()
    out = []
    for c in calls:
        sig = call_signature(c.name, c.arguments)
        if sig not in seen:
            seen.add(sig)
            out.append(c)
    return out


def _unanswered_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Calls of the last assistant turn that have no result yet (a job resumed mid-turn)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant":
            answered = {x.tool_call_id for x in messages[i + 1 :] if x.role == "tool"}
            return [c for c in m.tool_calls or () if c.id not in answered]
        if m.role != "tool":
            return []
    return []


class ConversationLoop:
    def __init__(
        self,
        engine: Engine,
        template: ChatTemplate,
        fmt: ToolCallFormat,
        tools: ToolResolver | ToolRegistry,
        *,
        tool_timeout_s: float = 30.0,
        prompt_variant: str | None = None,
    ):
        self.engine = engine
        self.template = template
        self.fmt = fmt
        # a bare registry (unit tests, benchmarks): the worker's own tools and nothing else
        self.tools = tools if isinstance(tools, ToolResolver) else ToolResolver([RegistrySource(tools)])
        self.tool_timeout_s = tool_timeout_s
        self.prompt_variant = prompt_variant
        self._grammars: dict[tuple[str, bool], str] = {}

    @staticmethod
    def forced_tools(box: ToolBox, request: JobRequest) -> list[ToolDefinition]:
        """The specs of the first round: the named tool_choice only, or all of the job's."""
        specs = box.specs()
        forced = request.forced_tool()
        if forced:
            specs = [s for s in specs if s["function"]["name"] == forced]
            if not specs:
                raise KeyError(f"tool_choice names {forced!r}, which this worker does not serve")
        return specs

    async def run(
        self,
        request: JobRequest,
        sink: EventSink,
        *,
        state: LoopState | None = None,
        stop_event: threading.Event | None = None,
    ) -> LoopOutcome:
        stop_event = stop_event or threading.Event()
        box = await self.tools.box(request)
        tools = self.forced_tools(box, request)
        all_tools = box.specs()
        state = state or LoopState(messages=list(request.messages))
        names = box.names()
        forced_first = request.tool_choice == "required" or request.forced_tool() is not None

        # A resumed job may have stopped while calls of its last turn were running, or paused
        # on calls that wait on its caller: finish that turn first.
        unanswered = _unanswered_calls(state.messages) if state.iterations else []
        if unanswered:
            waiting = await self._resume_turn(unanswered, box, sink, state)
            if waiting:
                return LoopOutcome("", "requires_action", state, waiting)

        while True:
            if state.iterations >= request.max_iterations and state.messages[-1].role == "tool":
                # the cap: one last round with tools disabled produces the answer
                gen = await self._generate(request, state, [], self._answer_grammar(request), None, stop_event, sink)
                parsed = self.fmt.parse(gen.text, set())
                content = parsed.content if (parsed.tool_calls or parsed.errors) else gen.text.strip()
                content, gen = await self._in_answer_format(request, state, gen, content, [], stop_event, sink)
                state.messages.append(Message(role="assistant", content=content))
                return LoopOutcome(content, "max_iterations", state)

            first_round = state.iterations == 0
            required = forced_first and first_round
            prompt_tools = tools if (required or not forced_first) else all_tools
            grammar, trigger = self._grammar(prompt_tools, required, request.parallel_tool_calls)
            if not prompt_tools:
                grammar, trigger = self._answer_grammar(request), None
            gen = await self._generate(request, state, prompt_tools, grammar, trigger, stop_event, sink)
            parsed = with_streamed_ids(self.fmt.parse(gen.text, names), gen)

            if not parsed.tool_calls and not parsed.errors and not parsed.truncated_call:
                content, gen = await self._in_answer_format(
                    request, state, gen, parsed.content, prompt_tools, stop_event, sink
                )
                state.messages.append(Message(role="assistant", content=content))
                return LoopOutcome(content, "length" if gen.stop_reason == "length" else "stop", state)

            calls = _without_repeats(parsed.tool_calls)
            problems = list(parsed.errors)
            if gen.stop_reason == "length" and parsed.truncated_call:
                # the call that max_tokens cut does not run; complete calls before it do
                problems = [
                    f"your output was cut off after {request.max_tokens} tokens in the middle of a "
                    "tool call, so that call was not executed; call it again with shorter arguments"
                ]
                if calls:
                    problems = []  # the model gets the results of the complete calls instead
            state.messages.append(Message(role="assistant", content=parsed.content or None, tool_calls=calls or None))
            if problems and not calls:
                state.messages.append(Message(role="tool", name="error", content=self._problem_text(problems)))
                continue
            waiting = await self._run_calls(calls, box, sink, state)
            if waiting:
                return LoopOutcome(parsed.content, "requires_action", state, waiting)

    # ------------------------------------------------------------------ pieces

    async def _generate(
        self,
        request: JobRequest,
        state: LoopState,
        tools: list[ToolDefinition],
        grammar: str | None,
        trigger: str | None,
        stop_event,
        sink: EventSink,
    ) -> GenerationResult:
        prompt = self.template.render(
            state.messages, tools=tools, fmt=self.fmt, add_generation_prompt=True, prompt_variant=self.prompt_variant
        )
        state.iterations += 1
        structlog.contextvars.bind_contextvars(iteration=state.iterations)
        reader = TurnReader.for_generation(self.fmt, tools, grammar, trigger) if request.stream_tokens else None
        gen = await self.engine.generate(
            GenerationRequest(
                segments=prompt.segments,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=request.seed,
                stop=[*self.fmt.stop, *request.stop],
                grammar=grammar,
                grammar_trigger=trigger,
                stop_event=stop_event,
                on_text=partial(sink.push_text, reader=reader) if reader else None,
                stop_check=self._repeat_check({t["function"]["name"] for t in tools}) if tools else None,
            )
        )
        gen.call_id = reader.call_id if reader else None
        state.usage.add(
            Usage(
                prompt_tokens=gen.prompt_tokens,
                completion_tokens=gen.completion_tokens,
                cached_prompt_tokens=gen.cached_tokens,
            )
        )
        state.generate_ms += gen.prompt_ms + gen.decode_ms
        log.info(
            "generated",
            stop_reason=gen.stop_reason,
            prompt_tokens=gen.prompt_tokens,
            cached_tokens=gen.cached_tokens,
            completion_tokens=gen.completion_tokens,
            decode_tps=round(gen.decode_tps, 1),
            grammar=grammar is not None,
        )
        if gen.stop_reason == "aborted":
            raise Aborted()
        return gen

    @staticmethod
    def _answer_grammar(request: JobRequest) -> str | None:
        return answer_grammar(request.response_format) if request.response_format else None

    async def _in_answer_format(
        self,
        request: JobRequest,
        state: LoopState,
        gen: GenerationResult,
        content: str,
        offered: list[ToolDefinition],
        stop_event: threading.Event,
        sink: EventSink,
    ) -> tuple[str, GenerationResult]:
        """The answer, checked against ``response_format``. An answer written freely while tools
        were offered (no grammar could hold both) is written once more under the answer grammar;
        an answer max_tokens cut is returned as it is, with finish_reason ``length``."""
        fmt = request.response_format
        if fmt is None or gen.stop_reason == "length" or answer_problem(fmt, content) is None:
            return content, gen
        if offered:
            gen = await self._generate(request, state, [], answer_grammar(fmt), None, stop_event, sink)
            content = gen.text.strip()
            if gen.stop_reason == "length":
                return content, gen
        problem = answer_problem(fmt, content)
        if problem is not None:
            raise AnswerFormatError(problem)
        return content, gen

    def _repeat_check(self, names: set[str]) -> Callable[[str], bool]:
        """Stop a turn as soon as it holds the same call (name and arguments) twice.

        Small models repeat a call until max_tokens, and the repeats are dropped anyway
        (``_without_repeats``), so every token after the second copy is wasted decode time. The
        text is parsed again only when its newest piece can close a call (``}``, ``>`` or ``]``).
        """
        fmt = self.fmt
        seen = 0

        def check(text: str) -> bool:
            nonlocal seen
            tail, seen = text[seen:], len(text)
            if not any(ch in tail for ch in "}>]"):
                return False
            calls = fmt.parse(text, names).tool_calls
            return len(_without_repeats(calls)) < len(calls)

        return check

    def _grammar(self, tools: list[ToolDefinition], required: bool, parallel: bool) -> tuple[str | None, str | None]:
        """(grammar, lazy trigger). Required: the whole output is calls. Auto: free text, and a
        lazy grammar from the opening tag on. ``call_grammar`` is one call from the trigger on.

        Building and checking a grammar takes ~10 ms and a tool set's grammar never changes, so
        grammars are cached per (tools, mode).
        """
        if not tools:
            return None, None
        if not required and self.fmt.trigger is None:
            return None, None  # no opening tag to start a lazy grammar from
        single = not parallel and self.fmt.trigger is not None
        key = (json.dumps(tools, sort_keys=True), single)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self.fmt.call_grammar(tools) if single else self.fmt.grammar(tools, required=True)
            self._grammars[key] = grammar
            while len(self._grammars) > _GRAMMAR_CACHE:
                self._grammars.pop(next(iter(self._grammars)))
        return grammar, (None if required else self.fmt.trigger)

    def _problem_text(self, problems: Sequence[str]) -> str:
        # name the format's own opening mark: a Mistral or Llama model has never seen <tool_call>
        mark = f" after {self.fmt.trigger}" if self.fmt.trigger else ""
        return (
            "Your tool call could not be used: "
            + "; ".join(problems)
            + f". Write the call again{mark} with valid arguments, or answer without a tool."
        )

    async def _resume_turn(
        self, calls: Sequence[ToolCall], box: ToolBox, sink: EventSink, state: LoopState
    ) -> list[PendingAction]:
        """Finish a turn an earlier attempt left: calls that were running when it stopped are
        answered as interrupted (at most once: their effects may already have happened); calls
        that wait on the caller take the caller's answer, or keep waiting without one."""
        runs: list[tuple[ToolCall, Where, Any]] = []
        waiting: list[ToolCall] = []
        for call in calls:
            kind = state.awaiting.get(call.id)
            answer = state.answers.get(call.id)
            tool = box.get(call.name)
            where: Where = tool.where if tool else "worker"
            if kind is None:
                await self._answer(call, state, sink, where, ok=False, text=_interrupted_text(call), executed=False)
                log.warning("tool call interrupted by a lost attempt; not run again", tool=call.name)
            elif answer is None:
                waiting.append(call)
            elif kind == "client":
                del state.awaiting[call.id]
                ok = not answer.get("is_error", False)
                await self._answer(
                    call, state, sink, "client", ok=ok, text=str(answer.get("content", "")), executed=True
                )
            elif not answer.get("approved"):
                del state.awaiting[call.id]
                reason = answer.get("reason")
                text = f"The call to {call.name} was refused by the user" + (f": {reason}" if reason else ".")
                text += " Do not call it again with these arguments; continue without it or ask the user."
                await self._answer(call, state, sink, where, ok=False, text=text, executed=False)
            elif tool is not None and tool.where == "client":
                state.awaiting[call.id] = "client"  # approved: now the caller runs it
                waiting.append(call)
            else:
                del state.awaiting[call.id]
                checked = box.check(call.name, call.arguments)
                runs.append((call, where, self._runner(box, checked, call)))
        if runs:
            await self._execute(runs, sink, state)
        return [self._pending(c, box, state) for c in waiting]

    async def _answer(
        self, call: ToolCall, state: LoopState, sink: EventSink, where: Where, *, ok: bool, text: str, executed: bool
    ) -> None:
        state.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=text))
        await sink.tool_result(
            call,
            ok=ok,
            content=text if ok else "",
            error=None if ok else text,
            duration_ms=0.0,
            executed=executed,
            checkpoint=state.checkpoint(),
            where=where,
        )

    @staticmethod
    def _pending(call: ToolCall, box: ToolBox, state: LoopState) -> PendingAction:
        tool = box.get(call.name)
        kind: Literal["client", "approval"] = "client" if state.awaiting.get(call.id) == "client" else "approval"
        return PendingAction(
            id=call.id, name=call.name, arguments=call.arguments, kind=kind, where=tool.where if tool else "client"
        )

    def _runner(self, box: ToolBox, checked: Any, call: ToolCall) -> Callable[[], Any]:
        async def go() -> tuple[ToolOutcome, bool]:
            return await box.run(checked, call_id=call.id, timeout_s=self.tool_timeout_s), True

        return go

    async def _run_calls(
        self, calls: Sequence[ToolCall], box: ToolBox, sink: EventSink, state: LoopState
    ) -> list[PendingAction]:
        """Announce the turn's calls, run those that can run now, and return those that wait on
        the caller (client tools, approvals)."""
        earlier = _earlier_results(state.messages)
        names = box.names()
        runs: list[tuple[ToolCall, Where, Any]] = []
        waiting: list[ToolCall] = []

        def immediate(outcome: ToolOutcome) -> Callable[[], Any]:
            async def go() -> tuple[ToolOutcome, bool]:
                return outcome, False

            return go

        for call in calls:
            tool = box.get(call.name)
            where: Where = tool.where if tool else "worker"
            if tool is None or call.name not in names:
                listed = ", ".join(sorted(names)) or "none"
                text = f"unknown tool {call.name!r}; the tools you can call are: {listed}"
                runs.append((call, where, immediate(ToolOutcome(False, "", text, 0.0))))
                continue
            checked = box.check(call.name, call.arguments)  # once: the run takes the checked values
            if checked.errors:
                text = (
                    f"invalid arguments for {call.name}: "
                    + "; ".join(checked.errors)
                    + ". Call the tool again with corrected arguments."
                )
                runs.append((call, where, immediate(ToolOutcome(False, "", text, 0.0))))
                continue
            sig = call_signature(call.name, call.arguments)
            if sig in earlier:
                note = (
                    f"You already called {call.name} with these arguments; the result was: {earlier[sig]}. "
                    "Use that result instead of calling again."
                )
                runs.append((call, where, immediate(ToolOutcome(True, note, None, 0.0))))
                continue
            if tool.requires_approval:
                state.awaiting[call.id] = "approval"
                waiting.append(call)
            elif tool.where == "client":
                state.awaiting[call.id] = "client"
                waiting.append(call)
            else:
                runs.append((call, where, self._runner(box, checked, call)))

        for i, call in enumerate(calls):
            # The first announcement checkpoints the turn with its calls, so a job resumed while
            # they run knows they started and does not run them a second time.
            tool = box.get(call.name)
            await sink.tool_call(
                call,
                state.iterations,
                checkpoint=state.checkpoint() if i == 0 else None,
                where=tool.where if tool else "worker",
                awaiting=state.awaiting.get(call.id),
            )
        if runs:
            await self._execute(runs, sink, state)
        return [self._pending(c, box, state) for c in waiting]

    async def _execute(self, runs: Sequence[tuple[ToolCall, Where, Any]], sink: EventSink, state: LoopState) -> None:
        """Run calls concurrently; publish each result as it finishes, with the checkpoint of
        all finished so far."""

        async def one(call: ToolCall, where: Where, go: Any) -> tuple[ToolCall, Where, ToolOutcome, bool]:
            structlog.contextvars.bind_contextvars(tool=call.name)  # this task's context only
            outcome, executed = await go()
            return call, where, outcome, executed

        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(one(c, w, go)) for c, w, go in runs]
        try:
            for fut in asyncio.as_completed(tasks):
                call, where, outcome, executed = await fut
                text = outcome.content if outcome.ok else (outcome.error or "the tool failed")
                state.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=text))
                log.info(
                    "tool result",
                    tool=call.name,
                    where=where,
                    ok=outcome.ok,
                    executed=executed,
                    duration_ms=round(outcome.duration_ms, 2),
                )
                await sink.tool_result(
                    call,
                    ok=outcome.ok,
                    content=outcome.content,
                    error=outcome.error,
                    duration_ms=outcome.duration_ms,
                    executed=executed,
                    checkpoint=state.checkpoint(),
                    where=where,
                )
        finally:
            for t in tasks:
                t.cancel()
            state.tools_ms += (time.perf_counter() - t0) * 1000


def _interrupted_text(call: ToolCall) -> str:
    return (
        f"The call to {call.name} was interrupted before its result was recorded (the worker running "
        "it stopped), so it may or may not have taken effect. Check before relying on it, and call "
        "it again only if doing it twice is safe."
    )
