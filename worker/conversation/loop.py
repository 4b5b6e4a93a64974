"""The conversation loop: render, generate, parse, validate, execute, feed back, repeat.

Pure orchestration over an engine, a chat template, a tool-call format, the job's tools and an
event sink. It knows nothing of Redis or llama.cpp, so unit tests drive it with a scripted engine
and an in-memory sink, and the worker drives it with LlamaEngine and EventLog.

Rules (each has a test in tests/unit/conversation/test_loop.py):
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

What becomes of each call is decided in ``triage.py`` and carried out in ``steps.py``; a round's
generation is ``rounds.py``, its grammar ``grammars.py``; the texts the model reads are ``texts.py``.
"""

from __future__ import annotations

import threading

from toolq.tools import ToolRegistry, UnknownToolError
from toolq.wire.protocol import JobRequest, Message
from worker.conversation import texts, triage
from worker.conversation.grammars import ToolGrammars
from worker.conversation.rounds import Rounds
from worker.conversation.sink import EventSink
from worker.conversation.state import LoopOutcome, LoopState
from worker.conversation.steps import announce, carry_out, note_waits
from worker.conversation.transcript import earlier_results, unanswered_calls, without_repeats
from worker.formats.base import ToolCallFormat, ToolDefinition
from worker.generation import Engine
from worker.grammar.budget import GrammarBudget
from worker.sources.registry import RegistrySource
from worker.templates import ChatTemplate
from worker.toolbox import ToolBox, ToolResolver


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
        grammar_budget: GrammarBudget | None = None,
    ):
        self.engine = engine
        self.template = template
        self.fmt = fmt
        # a bare registry (unit tests, benchmarks): the worker's own tools and nothing else
        self.tools = tools if isinstance(tools, ToolResolver) else ToolResolver([RegistrySource(tools)])
        self.tool_timeout_s = tool_timeout_s
        self.prompt_variant = prompt_variant
        self.grammars = ToolGrammars(budget=grammar_budget)

    @staticmethod
    def forced_tools(box: ToolBox, request: JobRequest) -> list[ToolDefinition]:
        """The specs of the first round: the named tool_choice only, or all of the job's."""
        specs = box.specs()
        forced = request.forced_tool()
        if forced:
            specs = [s for s in specs if s["function"]["name"] == forced]
            if not specs:
                raise UnknownToolError([forced], sorted(box.names()), named_by="tool_choice")
        return specs

    async def run(
        self,
        request: JobRequest,
        sink: EventSink,
        *,
        state: LoopState | None = None,
        stop_event: threading.Event | None = None,
        job_id: str = "",
    ) -> LoopOutcome:
        """``job_id`` salts each call's effect key (worker/conversation/steps.py ``key_of``)."""
        box = await self.tools.box(request)
        forced, offered = self.forced_tools(box, request), box.specs()
        state = state or LoopState(messages=list(request.messages))
        rounds = Rounds(
            self.engine,
            self.template,
            self.fmt,
            self.prompt_variant,
            request,
            state,
            stop_event or threading.Event(),
            sink,
            self.grammars,
        )
        forced_first = request.tool_choice == "required" or request.forced_tool() is not None

        # A resumed job may have stopped while calls of its last turn were running, or paused
        # on calls that wait on its caller: finish that turn first.
        left = unanswered_calls(state.messages) if state.iterations else []
        if left:
            steps = [triage.left_call(c, box, state.awaiting.get(c.id), state.answers.get(c.id)) for c in left]
            note_waits(steps, state)
            waiting = await carry_out(steps, box, sink, state, timeout_s=self.tool_timeout_s, job_id=job_id)
            if waiting:
                return LoopOutcome("", "requires_action", state, waiting)

        while True:
            if state.iterations >= request.max_iterations and state.messages[-1].role == "tool":
                # the cap: one last round with tools disabled produces the answer
                gen, parsed = await rounds.turn([], await self.grammars.answer_constraint(request), set())
                content = parsed.content if (parsed.tool_calls or parsed.errors) else gen.text.strip()
                content, gen = await rounds.in_answer_format(gen, content, [])
                state.messages.append(Message(role="assistant", content=content))
                return LoopOutcome(content, "max_iterations", state)

            required = forced_first and state.iterations == 0
            tools = forced if (required or not forced_first) else offered
            if tools:
                constraint = await self.grammars.constraint(
                    self.fmt, tools, required=required, parallel=request.parallel_tool_calls
                )
            else:
                constraint = await self.grammars.answer_constraint(request)
            gen, parsed = await rounds.turn(tools, constraint, box.names())

            if not parsed.tool_calls and not parsed.errors and not parsed.truncated_call:
                content, gen = await rounds.in_answer_format(gen, parsed.content, tools)
                state.messages.append(Message(role="assistant", content=content))
                return LoopOutcome(content, "length" if gen.stop_reason == "length" else "stop", state)

            calls = without_repeats(parsed.tool_calls)
            problems = list(parsed.errors)
            if gen.stop_reason == "length" and parsed.truncated_call:
                # the call that max_tokens cut does not run; the complete calls before it do, and
                # the model gets their results instead
                problems = [] if calls else [texts.cut_off(request.max_tokens)]
            state.messages.append(Message(role="assistant", content=parsed.content or None, tool_calls=calls or None))
            if problems and not calls:
                text = texts.unreadable_calls(problems, self.fmt.trigger)
                state.messages.append(Message(role="tool", name="error", content=text))
                continue
            earlier = earlier_results(state.messages)
            steps = [triage.new_call(c, box, earlier) for c in calls]
            note_waits(steps, state)
            await announce(steps, sink, state, job_id)
            waiting = await carry_out(steps, box, sink, state, timeout_s=self.tool_timeout_s, job_id=job_id)
            if waiting:
                return LoopOutcome(parsed.content, "requires_action", state, waiting)
