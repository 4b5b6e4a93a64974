"""One attempt of one job: load it, run the conversation loop under its deadline, then publish
how it ended (final, cancelled or a typed error), or hand it back without publishing anything
half-done when another attempt took it over or the worker is shutting down."""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import suppress
from typing import Any

import structlog
from redis.exceptions import RedisError

from toolq.protocol import (
    ErrorCode,
    ErrorInfo,
    EventType,
    FinishReason,
    FunctionCall,
    JobRequest,
    JobResult,
    JobStatus,
    PendingAction,
    Timings,
    ToolCall,
    now_ms,
)
from toolq.store.jobstore import JobEnded, JobNotFound
from worker.budget import STOPPED, job_token_cap, over_budget, over_budget_message, watch_budget
from worker.cancel import watch_cancel
from worker.events import EventLog
from worker.generation import ContextLengthExceeded, EngineError
from worker.loop import Aborted, LoopState
from worker.state import RunningJob, WorkerState

log = structlog.get_logger("toolq.worker")


async def run_job(state: WorkerState, job_id: str, attempt: int) -> str:
    """Run one attempt of a job. Returns a short word for the queue's log."""
    store = state.store
    try:
        rec = await store.record(job_id)
    except JobNotFound:
        return "gone"
    if rec.get("terminal") == "1" or int(rec.get("attempt", 0)) != attempt:
        return "stale"  # an older queued copy of a job that moved on
    request = JobRequest.model_validate_json(rec["request"])
    checkpoint = json.loads(rec["checkpoint"]) if rec.get("checkpoint") else None
    events = EventLog(store, job_id, attempt, lease_ms=state.settings.lease_ms)
    # the queue runs each job in its own task, so this binds the job for everything it runs
    structlog.contextvars.bind_contextvars(job_id=job_id, attempt=attempt)
    bound = log
    try:
        await events.started(
            worker_id=state.worker_id, model=state.model, resumed=checkpoint is not None or attempt > 1
        )
    except JobEnded:
        return "ended"
    started_ms = now_ms()
    queue_ms = max(0, started_ms - int(rec.get("created_ms", started_ms))) if attempt == 1 else 0
    loop_state = LoopState.from_checkpoint(checkpoint) if checkpoint else None
    if loop_state is not None and rec.get("actions"):
        # resumed after a pause: the caller's answers, recorded by toolq/store/lua/answer.lua
        actions = json.loads(rec["actions"])
        loop_state.answers = {cid: a["answer"] for cid, a in actions.items() if a.get("answer") is not None}
    if request.stream_tokens:
        events.start_token_stream()

    stop_event = threading.Event()
    # the state the loop would make itself, made here so that the budget watcher sees its usage
    tracked = loop_state or LoopState(messages=list(request.messages))
    task = asyncio.create_task(state.loop.run(request, events, state=tracked, stop_event=stop_event))
    running = RunningJob(job_id, attempt, stop_event, task, usage=tracked.usage)
    running.token_cap = job_token_cap(rec, state.settings.tenants)
    state.running[job_id] = running
    watcher = asyncio.create_task(watch_cancel(store, running))
    budget = asyncio.create_task(watch_budget(running, tracked.usage, running.token_cap))
    timeout = min(request.timeout_s or state.settings.job_timeout_s, state.settings.job_timeout_cap_s)
    bound.info("job started", model=state.model, resumed=loop_state is not None, timeout_s=timeout)
    try:
        try:
            outcome = await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            await running.stop(running.why_stopped or "timeout")
            outcome = None
        except asyncio.CancelledError:
            # the queue cancels us on shutdown (after its grace period): hand the job back
            await running.stop(running.why_stopped or "shutdown")
            outcome = None
        except Exception:
            outcome = None  # the loop task's own error, read below
        result = await _finish(state, request, running, events, outcome, queue_ms, started_ms, bound)
    finally:
        watcher.cancel()
        budget.cancel()
        await events.close()
        state.running.pop(job_id, None)
        state.jobs_done += 1
    return result


async def _finish(
    state: WorkerState,
    request: JobRequest,
    running: RunningJob,
    events: EventLog,
    outcome: Any,
    queue_ms: float,
    started_ms: int,
    bound: Any,
) -> str:
    job_id, task = running.job_id, running.task
    why = running.why_stopped
    total_ms = float(now_ms() - started_ms)

    def timings(ls: LoopState | None) -> Timings:
        return Timings(
            queue_ms=queue_ms,
            generate_ms=round(ls.generate_ms, 3) if ls else 0.0,
            tools_ms=round(ls.tools_ms, 3) if ls else 0.0,
            total_ms=total_ms,
        )

    if why in ("superseded", "shutdown"):
        if why == "shutdown":
            # release the lease at once: another worker resumes from the checkpoint
            with suppress(RedisError):
                await state.leases.release(job_id)
        bound.info("job handed back", reason=why)
        return why

    exc = None
    if outcome is None and task.done() and not task.cancelled():
        exc = task.exception()
        if exc is None:
            outcome = task.result()
    if outcome is not None and over_budget(running.usage, running.token_cap):
        why = running.why_stopped = STOPPED  # its last round crossed the cap before the watcher looked
        outcome = None

    try:
        if outcome is not None and outcome.finish_reason == "requires_action":
            if request.on_client_tool == "end" and all(p.kind == "client" for p in outcome.pending):
                outcome.finish_reason = "tool_calls"  # the caller runs them and sends a new job
            else:
                return await _pause(state, request, running, outcome, bound)
        if outcome is not None:
            ls = outcome.state
            result = JobResult(
                job_id=job_id,
                status=JobStatus.succeeded,
                content=outcome.content,
                messages=ls.messages,
                iterations=ls.iterations,
                finish_reason=outcome.finish_reason,
                usage=ls.usage,
                timings=timings(ls),
                attempt=running.attempt,
                tool_calls=_calls(outcome.pending) if outcome.finish_reason == "tool_calls" else None,
            )
            await events.end(
                EventType.final,
                {
                    "content": outcome.content,
                    "finish_reason": outcome.finish_reason,
                    "iterations": ls.iterations,
                    "usage": ls.usage.model_dump(),
                    **(
                        {"tool_calls": [c.model_dump(mode="json") for c in result.tool_calls]}
                        if result.tool_calls
                        else {}
                    ),
                },
                result,
            )
            bound.info("job finished", finish_reason=outcome.finish_reason, iterations=ls.iterations)
            return "final"
        if why == "cancelled" or (isinstance(exc, Aborted) and why == "cancelled"):
            result = JobResult(
                job_id=job_id,
                status=JobStatus.cancelled,
                finish_reason="cancelled",
                messages=request.messages,
                timings=timings(None),
                attempt=running.attempt,
                usage=running.usage,
            )
            await events.end(EventType.cancelled, {"reason": "cancelled while running"}, result)
            bound.info("job cancelled")
            return "cancelled"
        reason: FinishReason
        if why == "timeout":
            code, message, reason = ErrorCode.timeout, "the job ran past its timeout and was stopped", "timeout"
        elif why == STOPPED:
            code, reason = ErrorCode.budget_exceeded, "error"
            message = over_budget_message(running.usage, running.token_cap or 0)
        else:
            code, message, reason = _classify(exc)
        result = JobResult(
            job_id=job_id,
            status=JobStatus.failed,
            finish_reason=reason,
            error=ErrorInfo(code=code, message=message),
            messages=request.messages,
            timings=timings(None),
            attempt=running.attempt,
        )
        result.usage = running.usage  # the tokens this job used, counted once against its tenant
        data: dict[str, Any] = {"code": code.value, "message": message}
        if why == STOPPED:
            data["usage"] = running.usage.model_dump()
        await events.end(EventType.error, data, result)
        bound.warning("job failed", code=code.value, error=message)
        return "error"
    except JobEnded as e:
        bound.info("job ended elsewhere", reason=e.reason)
        return "ended"


def _calls(pending: list[PendingAction]) -> list[ToolCall]:
    return [ToolCall(id=p.id, function=FunctionCall(name=p.name, arguments=p.arguments)) for p in pending]


async def _pause(state: WorkerState, request: JobRequest, running: RunningJob, outcome: Any, bound: Any) -> str:
    """Park the job until its caller answers: it keeps no worker, slot or queue entry meanwhile."""
    s = state.settings
    wait_s = min(request.action_timeout_s or s.action_timeout_s, s.action_timeout_cap_s)
    deadline = now_ms() + int(wait_s * 1000)
    await state.store.pause(
        running.job_id,
        attempt=running.attempt,
        pending=outcome.pending,
        deadline_ms=deadline,
        checkpoint=outcome.state.checkpoint(),
    )
    bound.info("job paused", waits_on=[p.id for p in outcome.pending], action_timeout_s=wait_s)
    return "paused"


def _classify(exc: BaseException | None) -> tuple[ErrorCode, str, FinishReason]:
    if exc is None:
        return ErrorCode.internal, "the job stopped without an outcome", "error"
    if isinstance(exc, ContextLengthExceeded):
        return ErrorCode.context_length_exceeded, str(exc), "length"
    if isinstance(exc, EngineError):
        return ErrorCode.engine_error, str(exc), "error"
    if isinstance(exc, KeyError):
        return ErrorCode.unknown_tool, str(exc.args[0] if exc.args else exc), "error"
    return ErrorCode.internal, f"{type(exc).__name__}: {exc}", "error"
