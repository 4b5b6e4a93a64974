"""The worker's spans of a job, on top of toolq/tracing (one flag read each when tracing is off).

- ``attempt``: one attempt (worker/jobrun.py), the child of the gateway's ``submit`` span whose
  context the job's record keeps, or a new trace when it keeps none. ``queue``: the wait from
  submission to pick-up, recorded at pick-up with the record's times (first attempts only).
- ``chat``: one round of generation, ``chat {model}`` (worker/conversation/rounds.py): child
  spans ``prefill`` and ``decode`` placed from the figures the engine reports (``prompt_ms``,
  ``decode_ms``; the engine itself is not traced, and its decode thread never sees a span), and
  events ``render`` and ``parse`` (with their durations) for the template and the format.
- ``tool``: one executed call, ``execute_tool {name}`` (worker/toolbox.py), current while its
  source runs it, so a tool service (toolq/services/caller.py) or an MCP server
  (toolq/mcp/connection.py) receives its context.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext

from opentelemetry.trace import Span, get_current_span

from store.records import JobRecord
from toolq.tools import ToolOutcome
from toolq.tracing import NO_SPAN, SpanKind, failed, genai, parent_context, record, span
from toolq.tracing import on as tracing_on
from toolq.tracing.tool_span import tool_failed, tool_span
from toolq.wire.protocol import JobRequest, Usage
from worker.generation import GenerationResult

_MS = 1_000_000  # ns per ms


def attempt(rec: JobRecord, model: str, started_ms: int | None = None) -> AbstractContextManager[Span]:
    parent = parent_context({"traceparent": rec.traceparent, "tracestate": rec.tracestate})
    if parent is not None and rec.attempt == 1 and rec.created_ms and started_ms:
        record("queue", rec.created_ms * _MS, started_ms * _MS, context=parent, attributes={genai.JOB_ID: rec.job_id})
    return span(
        "attempt",
        kind=SpanKind.CONSUMER,  # it takes the job off the queue the gateway put it on
        context=parent,
        attributes={
            genai.OPERATION_NAME: genai.INVOKE_AGENT,
            genai.AGENT_NAME: genai.AGENT,
            genai.REQUEST_MODEL: model,
            genai.JOB_ID: rec.job_id,
            genai.ATTEMPT: rec.attempt,
            genai.TENANT: rec.tenant,
        },
    )


def attempt_ended(outcome: str, usage: Usage | None) -> None:
    """The current attempt's ending (the word run_job returns) and the tokens it used."""
    s = get_current_span()
    if not s.is_recording():
        return
    s.set_attribute(genai.ENDING, outcome)
    if usage is not None:
        s.set_attributes(
            {genai.USAGE_INPUT_TOKENS: usage.prompt_tokens, genai.USAGE_OUTPUT_TOKENS: usage.completion_tokens}
        )
    if outcome == "error":
        failed(s, "job_error")


def chat(model: str, request: JobRequest, iteration: int) -> AbstractContextManager[Span]:
    if not tracing_on():
        return NO_SPAN
    attributes: dict[str, str | int | float] = {
        genai.OPERATION_NAME: genai.CHAT,
        genai.PROVIDER_NAME: genai.PROVIDER,
        genai.REQUEST_MODEL: model,
        genai.REQUEST_MAX_TOKENS: request.max_tokens,
        genai.REQUEST_TEMPERATURE: request.temperature,
        genai.ITERATION: iteration,
    }
    if request.seed is not None:
        attributes[genai.REQUEST_SEED] = request.seed
    return span(f"chat {model}", attributes=attributes)


def step(name: str) -> AbstractContextManager[object]:
    """A short step of the current round (``render``, ``parse``): an event on the round's span at
    the step's start, with its duration. Events, not spans: they cost a tuple each, and the
    engine's prefill and decode, which take the round's time, are spans."""
    return _Step(name) if tracing_on() else _NO_STEP


class _Step:
    __slots__ = ("name", "start")

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> _Step:
        self.start = time.time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        ms = (time.time_ns() - self.start) / _MS
        get_current_span().add_event(self.name, {"toolq.duration_ms": round(ms, 3)}, timestamp=self.start)


_NO_STEP = nullcontext()


def now_ns() -> int:
    return time.time_ns()


def generated(gen: GenerationResult, model: str, started_ns: int) -> None:
    """The round's usage and finish reason on the current span, and its prefill and decode as
    children placed from the engine's figures (prefill: from the request to the prompt's last
    token, slot wait included; decode: from there to the end)."""
    s = get_current_span()
    if not s.is_recording():
        return
    s.set_attributes(
        {
            genai.RESPONSE_MODEL: model,
            genai.USAGE_INPUT_TOKENS: gen.prompt_tokens,
            genai.USAGE_OUTPUT_TOKENS: gen.completion_tokens,
            genai.USAGE_CACHE_READ_INPUT_TOKENS: gen.cached_tokens,
            genai.RESPONSE_FINISH_REASONS: (gen.stop_reason,),
        }
    )
    prefill_end = started_ns + int(gen.prompt_ms * _MS)
    record(
        "prefill",
        started_ns,
        prefill_end,
        attributes={
            genai.USAGE_INPUT_TOKENS: gen.prompt_tokens,
            genai.USAGE_CACHE_READ_INPUT_TOKENS: gen.cached_tokens,
        },
    )
    record(
        "decode",
        prefill_end,
        prefill_end + int(gen.decode_ms * _MS),
        attributes={genai.USAGE_OUTPUT_TOKENS: gen.completion_tokens, "toolq.decode_tps": round(gen.decode_tps, 1)},
    )


def tool(name: str, call_id: str, where: str, effect_key: str) -> AbstractContextManager[Span]:
    return tool_span(name, call_id, where, effect_key=effect_key)


def tool_ended(outcome: ToolOutcome) -> None:
    if not outcome.ok:
        tool_failed(outcome.error)
