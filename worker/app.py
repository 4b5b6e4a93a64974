"""The worker service: an arq Worker that holds one model and runs conversation jobs.

arq supplies the queue mechanics; toolq adds what arq falls short on (DESIGN.md):
- pickup: enqueuers push a wake token; an idle worker blocks on it instead of sleeping a poll;
- leases: a running job's lease is renewed every heartbeat; any live worker of the model claims
  a job whose lease ran out and resumes it from its checkpoint as a new attempt (arq alone would
  wait job_timeout + 10 s);
- cancel and timeout: a cancel key polled while a job runs, and a per-job deadline, both stop
  the model thread between tokens;
- graceful stop: SIGTERM stops pickup, lets the running job finish for a grace period, then hands
  it back (its lease released at once) without publishing anything half-done.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import structlog
from arq.worker import Worker
from redis.exceptions import RedisError

from toolq import keys
from toolq.jobstore import RUN_JOB, JobEnded, JobNotFound, JobStore, connect, error_result
from toolq.protocol import (
    ErrorCode,
    EventType,
    JobRequest,
    JobResult,
    JobStatus,
    Timings,
    now_ms,
)
from worker.events import EventLog
from worker.formats import get_format
from worker.generation import ContextLengthExceeded, Engine, EngineError
from worker.loop import Aborted, ConversationLoop, LoopState
from worker.settings import WorkerSettings
from worker.templates import ChatTemplate
from worker.tools import ToolRegistry, load_tool_modules

log = structlog.get_logger("toolq.worker")

CANCEL_POLL_S = 0.05


@dataclass
class RunningJob:
    job_id: str
    attempt: int
    stop_event: threading.Event
    task: asyncio.Task
    why_stopped: Optional[str] = None  # cancelled | timeout | superseded | shutdown


@dataclass
class WorkerState:
    """What one worker process holds: the model, the conversation parts and its running jobs."""

    settings: WorkerSettings
    engine: Engine
    loop: ConversationLoop
    store: JobStore
    registry: ToolRegistry
    model: str
    worker_id: str
    running: dict[str, RunningJob] = field(default_factory=dict)
    jobs_done: int = 0
    beats: int = 0
    background: list[asyncio.Task] = field(default_factory=list)
    worker: Optional["ToolqWorker"] = None


def build_loop(settings: WorkerSettings, engine: Engine, registry: ToolRegistry) -> ConversationLoop:
    path = settings.template_path()
    bos, eos = getattr(engine, "bos_token", ""), getattr(engine, "eos_token", "")
    if path is None:
        template = ChatTemplate.from_gguf_metadata(getattr(engine, "metadata", {}), bos_token=bos, eos_token=eos)
    else:
        template = ChatTemplate.from_file(path, bos_token=bos, eos_token=eos)
    return ConversationLoop(engine, template, get_format(settings.tool_format), registry,
                            tool_timeout_s=settings.tool_timeout_s, prompt_variant=settings.prompt_variant)


# ---------------------------------------------------------------------- the job


async def run_job(ctx: dict[str, Any], job_id: str, attempt: int) -> str:
    """arq entry point: run one attempt of a job. Returns a short word for arq's log."""
    state: WorkerState = ctx["toolq"]
    store = state.store
    try:
        rec = await store.record(job_id)
    except JobNotFound:
        return "gone"
    if rec.get("terminal") == "1" or int(rec.get("attempt", 0)) != attempt:
        return "stale"  # an older arq copy of a job that moved on
    request = JobRequest.model_validate_json(rec["request"])
    checkpoint = json.loads(rec["checkpoint"]) if rec.get("checkpoint") else None
    events = EventLog(store, job_id, attempt, lease_ms=state.settings.lease_ms)
    # arq runs each job in its own task, so this binds the job for everything it runs
    structlog.contextvars.bind_contextvars(job_id=job_id, attempt=attempt)
    bound = log
    try:
        await events.started(worker_id=state.worker_id, model=state.model, resumed=checkpoint is not None or attempt > 1)
    except JobEnded:
        return "ended"
    started_ms = now_ms()
    queue_ms = max(0, started_ms - int(rec.get("created_ms", started_ms))) if attempt == 1 else 0
    loop_state = LoopState.from_checkpoint(checkpoint) if checkpoint else None
    if request.stream_tokens:
        events.start_token_stream()

    stop_event = threading.Event()
    task = asyncio.create_task(state.loop.run(request, events, state=loop_state, stop_event=stop_event))
    running = RunningJob(job_id, attempt, stop_event, task)
    state.running[job_id] = running
    watcher = asyncio.create_task(_watch_cancel(store, running))
    timeout = min(request.timeout_s or state.settings.job_timeout_s, state.settings.job_timeout_cap_s)
    bound.info("job started", model=state.model, resumed=loop_state is not None, timeout_s=timeout)
    try:
        try:
            outcome = await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            running.why_stopped = running.why_stopped or "timeout"
            await _stop(running)
            outcome = None
        except asyncio.CancelledError:
            # arq cancels us on shutdown (after its grace period): hand the job back
            running.why_stopped = running.why_stopped or "shutdown"
            await _stop(running)
            outcome = None
        except Exception:
            outcome = None  # the loop task's own error, read below
        result = await _finish(state, request, running, events, outcome, queue_ms, started_ms, bound)
    finally:
        watcher.cancel()
        await events.close()
        state.running.pop(job_id, None)
        state.jobs_done += 1
    return result


async def _watch_cancel(store: JobStore, running: RunningJob) -> None:
    while not running.task.done():
        try:
            if await store.cancel_requested(running.job_id):
                running.why_stopped = "cancelled"
                running.stop_event.set()
                running.task.cancel()
                return
        except RedisError:
            pass  # Redis blinking: try again next tick; the job itself will report if it cannot go on
        await asyncio.sleep(CANCEL_POLL_S)


async def _stop(running: RunningJob) -> None:
    """Stop the model thread and the loop task, and wait until both are really stopped."""
    running.stop_event.set()
    running.task.cancel()
    await asyncio.gather(running.task, return_exceptions=True)


async def _finish(state: WorkerState, request: JobRequest, running: RunningJob, events: EventLog,
                  outcome: Any, queue_ms: float, started_ms: int, bound: Any) -> str:
    job_id, task = running.job_id, running.task
    why = running.why_stopped
    total_ms = float(now_ms() - started_ms)

    def timings(ls: Optional[LoopState]) -> Timings:
        return Timings(queue_ms=queue_ms, generate_ms=round(ls.generate_ms, 3) if ls else 0.0,
                       tools_ms=round(ls.tools_ms, 3) if ls else 0.0, total_ms=total_ms)

    if why in ("superseded", "shutdown"):
        if why == "shutdown":
            # release the lease at once: another worker resumes from the checkpoint
            await _quietly(state.store.release_lease(job_id))
        bound.info("job handed back", reason=why)
        return why

    exc = None
    if outcome is None and task.done() and not task.cancelled():
        exc = task.exception()
        if exc is None:
            outcome = task.result()

    try:
        if outcome is not None:
            ls = outcome.state
            result = JobResult(job_id=job_id, status=JobStatus.succeeded, content=outcome.content,
                               messages=ls.messages, iterations=ls.iterations, finish_reason=outcome.finish_reason,
                               usage=ls.usage, timings=timings(ls), attempt=running.attempt)
            await events.end(EventType.final, {"content": outcome.content, "finish_reason": outcome.finish_reason,
                                               "iterations": ls.iterations, "usage": ls.usage.model_dump()}, result)
            bound.info("job finished", finish_reason=outcome.finish_reason, iterations=ls.iterations)
            return "final"
        if why == "cancelled" or isinstance(exc, Aborted) and why == "cancelled":
            result = JobResult(job_id=job_id, status=JobStatus.cancelled, finish_reason="cancelled",
                               messages=request.messages, timings=timings(None), attempt=running.attempt)
            await events.end(EventType.cancelled, {"reason": "cancelled while running"}, result)
            bound.info("job cancelled")
            return "cancelled"
        if why == "timeout":
            code, message, reason = ErrorCode.timeout, "the job ran past its timeout and was stopped", "timeout"
        else:
            code, message, reason = _classify(exc)
        result = error_result(job_id, code, message, finish_reason=reason, messages=request.messages,
                              timings=timings(None), attempt=running.attempt)
        await events.end(EventType.error, {"code": code.value, "message": message}, result)
        bound.warning("job failed", code=code.value, error=message)
        return "error"
    except JobEnded as e:
        bound.info("job ended elsewhere", reason=e.reason)
        return "ended"


def _classify(exc: Optional[BaseException]) -> tuple[ErrorCode, str, str]:
    if exc is None:
        return ErrorCode.internal, "the job stopped without an outcome", "error"
    if isinstance(exc, ContextLengthExceeded):
        return ErrorCode.context_length_exceeded, str(exc), "length"
    if isinstance(exc, EngineError):
        return ErrorCode.engine_error, str(exc), "error"
    if isinstance(exc, KeyError):
        return ErrorCode.unknown_tool, str(exc.args[0] if exc.args else exc), "error"
    return ErrorCode.internal, f"{type(exc).__name__}: {exc}", "error"


async def _quietly(coro: Any) -> None:
    try:
        await coro
    except RedisError:
        pass


# ---------------------------------------------------------------------- heartbeat and reaper


async def _heartbeat(state: WorkerState) -> None:
    """Keep the registry entry and the leases fresh; resume jobs whose worker died."""
    s = state.settings
    every = s.heartbeat_ms / 1000
    ttl_ms = max(3 * s.heartbeat_ms, 3000)
    specs = json.dumps(state.registry.specs())
    limit = max(2 * s.lease_ms / 1000, 2.0)
    while True:
        try:
            # a beat that hangs on a Redis call would stop every renewal and claim after it
            await asyncio.wait_for(_beat(state, specs, ttl_ms), limit)
        except asyncio.TimeoutError:
            log.warning("heartbeat timed out; retrying", limit_s=limit)
        except RedisError as e:
            log.warning("heartbeat failed", error=str(e))
        except Exception as e:  # never let the heartbeat die quietly
            log.error("heartbeat error", error=repr(e))
        await asyncio.sleep(every)


async def _beat(state: WorkerState, specs: str, ttl_ms: int) -> None:
    s, store = state.settings, state.store
    now = now_ms()
    async with store.redis.pipeline(transaction=False) as pipe:
        pipe.hset(keys.worker(state.worker_id), mapping={
            "id": state.worker_id, "model": state.model, "gpu": "" if s.gpu is None else s.gpu,
            "tools": specs, "heartbeat_ms": now, "busy": len(state.running), "jobs_done": state.jobs_done,
            "max_jobs": s.max_jobs, "host": socket.gethostname(), "pid": os.getpid(),
        })
        pipe.pexpire(keys.worker(state.worker_id), ttl_ms)
        pipe.sadd(keys.WORKERS, state.worker_id)
        await pipe.execute()
    for running in list(state.running.values()):
        if running.task.done():
            continue
        if not await store.renew_lease(running.job_id, running.attempt, s.lease_ms):
            # another worker took the job over (our lease ran out): stop without publishing
            running.why_stopped = "superseded"
            running.stop_event.set()
            running.task.cancel()
    state.beats += 1
    if state.beats % 20 == 1:
        await _prune_dead_workers(store)
    for job_id, attempt in await store.claim_expired(state.model, grace_ms=s.lease_ms * 3):
        log.warning("resuming job of a lost worker", job_id=job_id, attempt=attempt)
        await store.enqueue_attempt(job_id, state.model, attempt)


async def _prune_dead_workers(store: JobStore) -> None:
    """Drop registry ids whose hash expired (a worker that died without saying goodbye)."""
    ids = [m.decode() for m in await store.redis.smembers(keys.WORKERS)]
    if not ids:
        return
    async with store.redis.pipeline(transaction=False) as pipe:
        for wid in ids:
            pipe.exists(keys.worker(wid))
        alive = await pipe.execute()
    dead = [wid for wid, ok in zip(ids, alive) if not ok]
    if dead:
        await store.redis.srem(keys.WORKERS, *dead)


# ---------------------------------------------------------------------- the arq worker


class ToolqWorker(Worker):
    """arq's Worker, woken by enqueuers instead of sleeping a poll, and riding out Redis outages."""

    async def _poll_iteration(self) -> None:
        # arq's poll() sleeps whatever is left of poll_delay after each iteration, so a wake
        # must be served inside the iteration: keep picking and waiting until the step is used up.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.poll_delay_s
        while True:
            try:
                await super()._poll_iteration()
            except (RedisError, OSError) as e:
                log.warning("queue poll failed; retrying", error=str(e))
                await asyncio.sleep(min(1.0, self.poll_delay_s))
                return
            left = deadline - loop.time()
            if left <= 0 or not self.allow_pick_jobs or not self.ctx["toolq"].settings.wake_on_enqueue:
                return  # plain arq: its poll() sleeps the rest of poll_delay
            await self._wait_for_work(left)

    async def _wait_for_work(self, timeout: float) -> None:
        """Block until a job may be waiting: a wake token when idle, a finished job when busy."""
        if self.job_counter < self.max_jobs:
            model = self.ctx["toolq"].model
            try:
                await self.pool.blpop([keys.wake(model)], timeout=timeout)
            except (RedisError, OSError):
                await asyncio.sleep(timeout)
        else:
            busy = [t for t in self.tasks.values() if not t.done()]
            if busy:
                await asyncio.wait(busy, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(min(timeout, 0.01))


async def _startup(ctx: dict[str, Any], settings: WorkerSettings, engine: Engine) -> None:
    registry = load_tool_modules(settings.tool_modules)
    store = JobStore(ctx["redis"], event_ttl_s=settings.event_ttl_s, stream_maxlen=settings.stream_maxlen)
    model = settings.model_name or engine.name
    state = WorkerState(settings=settings, engine=engine, loop=build_loop(settings, engine, registry), store=store,
                        registry=registry, model=model, worker_id=ctx["worker_id"])
    ctx["toolq"] = state
    state.background.append(asyncio.create_task(_heartbeat(state)))
    log.info("worker ready", worker_id=state.worker_id, model=model, queue=keys.queue(model),
             tools=registry.names(), gpu=settings.gpu)


async def _shutdown(ctx: dict[str, Any]) -> None:
    state: Optional[WorkerState] = ctx.get("toolq")
    if state is None:
        return
    for t in state.background:
        t.cancel()
    await asyncio.gather(*state.background, return_exceptions=True)
    await _quietly(state.store.redis.srem(keys.WORKERS, state.worker_id))
    await _quietly(state.store.redis.delete(keys.worker(state.worker_id)))


def create_worker(settings: WorkerSettings, engine: Engine, *, worker_id: Optional[str] = None,
                  handle_signals: bool = True) -> ToolqWorker:
    """An arq worker for this model's queue, with msgpack payloads and our Redis client."""
    model = settings.model_name or engine.name
    worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    pool = connect(settings.redis_url)
    pool.default_queue_name = keys.queue(model)

    async def on_startup(ctx: dict[str, Any]) -> None:
        ctx["worker_id"] = worker_id
        await _startup(ctx, settings, engine)

    worker = ToolqWorker(
        functions=[_arq_function()],
        queue_name=keys.queue(model),
        redis_pool=pool,
        on_startup=on_startup,
        on_shutdown=_shutdown,
        max_jobs=settings.max_jobs,
        job_timeout=settings.job_timeout_cap_s + 60,  # our own deadline stops jobs; arq's is a backstop
        keep_result=0,  # results live in the job record, typed; arq's would be pickled-shaped
        max_tries=1000,  # attempts are ours (leases); an arq retry of a stale attempt is a no-op
        poll_delay=settings.poll_delay_s,
        health_check_interval=5,
        health_check_key=f"{keys.PREFIX}:health:{worker_id}",
        handle_signals=handle_signals,
        job_completion_wait=settings.shutdown_grace_s,
        job_serializer=pool.job_serializer,
        job_deserializer=pool.job_deserializer,
        log_results=False,
    )
    worker.ctx["worker_id"] = worker_id
    return worker


def _arq_function():
    from arq.worker import func

    return func(run_job, name=RUN_JOB)
