"""One attempt of one job: load it, run the conversation loop under its deadline, then publish
how it ended (final, cancelled or a typed error), park it for its caller, or hand it back without
publishing anything half-done when another attempt took it over or the worker is shutting down.
Which of these it is, ``worker/endings.py`` decides; here it is carried out."""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress
from dataclasses import dataclass

import structlog

from store.arq_link import RunAgain
from store.conversation_keys import transcript_keys
from store.durability import NotReplicated
from store.errors import RedisError
from store.jobstore import JobEnded
from store.records import JobRecord
from toolq.tenants import policy_of
from toolq.wire.payloads import CancelledData, ErrorData, FinalData
from toolq.wire.protocol import (
    ErrorCode,
    ErrorInfo,
    FunctionCall,
    JobRequest,
    JobResult,
    JobStatus,
    PendingAction,
    Timings,
    ToolCall,
    Usage,
    now_ms,
)
from worker import traces
from worker.budget import job_token_cap, over_budget, over_budget_message, watch_budget
from worker.conversation import LoopOutcome, LoopState
from worker.endings import Cancelled, Ending, Failed, Finished, HandedBack, Paused, StopCause, classify
from worker.events import EventLog
from worker.generation import CALLER
from worker.load import slot_freed
from worker.state import RunningJob, WorkerState

log = structlog.get_logger("toolq.worker")


async def run_job(state: WorkerState, job_id: str, attempt: int) -> str:
    """Run one attempt of a job. Returns a short word for the queue's log."""
    events = EventLog(state.store, job_id, attempt, lease_ms=state.settings.lease_ms)
    # the queue runs each job in its own task, so this binds the job for everything it runs
    structlog.contextvars.bind_contextvars(job_id=job_id, attempt=attempt)
    try:
        # the start hands back the record: no read before it (store/lua/start.lua)
        rec = await events.started(worker_id=state.worker_id, model=state.model)
    except JobEnded as e:
        # gone, ended, or an older queued copy of a job that moved on to a newer attempt
        return "gone" if e.reason == "no such job" else "ended"
    except NotReplicated as e:
        # its start may not outlive a failover: run nothing, and have arq queue it again (its
        # record on the surviving primary may still say queued, with no lease to recover it by)
        log.warning("job start not replicated; queued again", error=str(e))
        with suppress(RedisError):
            await state.leases.release(job_id)
        raise RunAgain() from None
    started_ms = now_ms()
    # the loop's task is made inside, so its spans and the tools' spans are this attempt's children
    with traces.attempt(rec, state.model, started_ms):
        result, usage = await _attempt(state, rec, events, started_ms)
        traces.attempt_ended(result, usage)
    return result


async def _attempt(state: WorkerState, rec: JobRecord, events: EventLog, started_ms: int) -> tuple[str, Usage]:
    """The attempt once started: returns the word for the queue's log and the tokens it used."""
    job_id, attempt = rec.job_id, rec.attempt
    # the request is validated again as it is read (its tools' schemas against the metaschema:
    # about 1 ms per subschema here), off the loop so that heartbeats and other slots go on
    request, checkpoint = await asyncio.to_thread(lambda: rec.request), rec.checkpoint
    queue_ms = max(0, started_ms - (rec.created_ms or started_ms)) if attempt == 1 else 0
    loop_state = LoopState.from_checkpoint(checkpoint) if checkpoint else None
    if loop_state is not None and rec.actions:
        # resumed after a pause: the caller's answers, recorded by store/lua/answer.lua
        actions = rec.actions
        loop_state.answers = {cid: a["answer"] for cid, a in actions.items() if a.get("answer") is not None}
    if request.stream_tokens:
        events.start_token_stream()

    stop_event = threading.Event()
    # the state the loop would make itself, made here so that the budget watcher sees its usage
    tracked = loop_state or LoopState(messages=list(request.messages))
    # the job's generations carry its tenant and weight to the engine, which shares its batch by them
    CALLER.set((rec.tenant, policy_of(state.settings.tenants, rec.tenant).weight))
    task = asyncio.create_task(
        state.loop.run(request, events, state=tracked, stop_event=stop_event, job_id=events.job_id)
    )
    running = RunningJob(job_id, attempt, stop_event, task, usage=tracked.usage)
    running.token_cap = job_token_cap(rec, state.settings.tenants)
    state.running[job_id] = running
    budget = asyncio.create_task(watch_budget(running, tracked.usage, running.token_cap))
    timeout = min(request.timeout_s or state.settings.job_timeout_s, state.settings.job_timeout_cap_s)
    log.info("job started", model=state.model, resumed=loop_state is not None, timeout_s=timeout)
    try:
        outcome: LoopOutcome | None = None
        try:
            outcome = await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            await running.stop(running.why_stopped or StopCause.timeout)
        except asyncio.CancelledError:
            # the queue cancels us on shutdown (after its grace period): hand the job back
            await running.stop(running.why_stopped or StopCause.shutdown)
        except Exception:
            pass  # the loop task's own error, read below
        outcome, error = _left_by(task, outcome)
        if outcome is not None and over_budget(running.usage, running.token_cap):
            running.why_stopped = StopCause.budget_exceeded  # its last round crossed the cap before the watcher looked
        ending = classify(running.why_stopped, outcome, error, on_client_tool=request.on_client_tool)
        timings = _Timings(queue_ms, started_ms)
        state.finishing.add(job_id)  # free before its ending is out (worker/load.py); app.py's run() ends it
        await slot_freed(state, job_id)
        result = await _carry_out(ending, state, request, running, events, timings)
    finally:
        budget.cancel()
        await events.close()
        state.running.pop(job_id, None)
        state.jobs_done += 1
    return result, running.usage


def _left_by(task: asyncio.Task, outcome: LoopOutcome | None) -> tuple[LoopOutcome | None, BaseException | None]:
    """What the loop task left: its outcome, or the error it raised (a task that ended after the
    wait gave up on it still counts)."""
    if outcome is None and task.done() and not task.cancelled():
        error = task.exception()
        if error is not None:
            return None, error
        outcome = task.result()
    return outcome, None


@dataclass(frozen=True)
class _Timings:
    queue_ms: float
    started_ms: int

    def of(self, ls: LoopState | None) -> Timings:
        return Timings(
            queue_ms=self.queue_ms,
            generate_ms=round(ls.generate_ms, 3) if ls else 0.0,
            tools_ms=round(ls.tools_ms, 3) if ls else 0.0,
            total_ms=float(now_ms() - self.started_ms),
        )


async def _carry_out(
    ending: Ending, state: WorkerState, request: JobRequest, running: RunningJob, events: EventLog, timings: _Timings
) -> str:
    """Publish the ending, park the job or hand it back. Returns a short word for the queue's log."""
    job_id, attempt = running.job_id, running.attempt
    if isinstance(ending, HandedBack):
        if ending.cause in (StopCause.shutdown, StopCause.store_lost):
            # release the lease at once: another worker resumes from the checkpoint
            with suppress(RedisError):
                await state.leases.release(job_id)
        log.info("job handed back", reason=ending.cause.value)
        return ending.cause.value
    try:
        if isinstance(ending, Paused | Finished):
            await _hold(state, request, ending.outcome.state)
        if isinstance(ending, Paused):
            return await _pause(state, request, running, ending.outcome)
        if isinstance(ending, Finished):
            outcome, ls, reason = ending.outcome, ending.outcome.state, ending.finish_reason
            calls = _calls(outcome.pending) if reason == "tool_calls" else None
            result = JobResult(
                job_id=job_id,
                status=JobStatus.succeeded,
                content=outcome.content,
                messages=ls.messages,
                iterations=ls.iterations,
                finish_reason=reason,
                usage=ls.usage,
                timings=timings.of(ls),
                attempt=attempt,
                tool_calls=calls,
            )
            final = FinalData(content=outcome.content, finish_reason=reason, iterations=ls.iterations, usage=ls.usage)
            if calls:
                final.tool_calls = calls
                final.effect_keys = {p.id: p.effect_key for p in outcome.pending if p.effect_key}
            await events.end(final, result)
            log.info("job finished", finish_reason=reason, iterations=ls.iterations)
            return "final"
        if isinstance(ending, Cancelled):
            result = JobResult(
                job_id=job_id,
                status=JobStatus.cancelled,
                finish_reason="cancelled",
                messages=request.messages,
                timings=timings.of(None),
                attempt=attempt,
                usage=running.usage,
            )
            await events.end(CancelledData(reason="cancelled while running"), result)
            log.info("job cancelled")
            return "cancelled"
        data = _error_data(ending, running)
        result = JobResult(
            job_id=job_id,
            status=JobStatus.failed,
            finish_reason=ending.finish_reason,
            error=ErrorInfo(code=ending.code, message=data.message),
            messages=request.messages,
            timings=timings.of(None),
            attempt=attempt,
            usage=running.usage,  # the tokens this job used, counted once against its tenant
        )
        await events.end(data, result)
        log.warning("job failed", code=ending.code.value, error=data.message)
        return "error"
    except JobEnded as e:
        log.info("job ended elsewhere", reason=e.reason)
        if e.taken_from_writer:
            await _note_outlived(state, running)
        return "ended"


async def _note_outlived(state: WorkerState, running: RunningJob) -> None:
    """This worker lived on past the lease of an attempt that was taken over: its loop stalled
    (or it lost Redis). The renewal is refused, and notes that attempt ``stalled`` in the
    record's ``attempts`` (store/lua/renew.lua); the heartbeat's renewal does the same for
    an attempt still running when it learns."""
    with suppress(RedisError):
        await state.leases.renew(running.job_id, running.attempt, state.settings.lease_ms)


async def _hold(state: WorkerState, request: JobRequest, ls: LoopState) -> None:
    """Tell the fleet this worker holds the transcript it just ran (store/affinity.py),
    before the job's ending is published, so the caller's next request can find it."""
    state.held.record(transcript_keys(state.model, request, ls.messages))
    with suppress(RedisError):
        await state.held.publish(state.store.redis, state.worker_id, state.registry_ttl_ms)


def _error_data(ending: Failed, running: RunningJob) -> ErrorData:
    if ending.code is not ErrorCode.budget_exceeded:
        return ErrorData(code=ending.code.value, message=ending.message)
    message = over_budget_message(running.usage, running.token_cap or 0)
    return ErrorData(code=ending.code.value, message=message, usage=running.usage)


def _calls(pending: list[PendingAction]) -> list[ToolCall]:
    return [ToolCall(id=p.id, function=FunctionCall(name=p.name, arguments=p.arguments)) for p in pending]


async def _pause(state: WorkerState, request: JobRequest, running: RunningJob, outcome: LoopOutcome) -> str:
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
    log.info("job paused", waits_on=[p.id for p in outcome.pending], action_timeout_s=wait_s)
    return "paused"
