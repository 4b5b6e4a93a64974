"""The worker service: one process that holds one model and runs conversation jobs from its queue.

The queue is arq's (store/arq_link.py holds everything that knows arq); this module wires the
worker's parts to it:
- pickup: enqueuers push a wake token; an idle worker blocks on it instead of sleeping a poll,
  and before each look at the queue asks for the fairly chosen jobs due next, one per free slot
  (store/fair.py), naming itself so that jobs offered to it first come to it and jobs
  offered to another worker wait for that one a moment (store/affinity.py);
- affinity: the worker tells the fleet which conversations it holds (worker/held.py) and its
  load when it becomes full or stops being full (worker/load.py);
- one attempt of a job (worker/jobrun.py), stopped between tokens by its cancel key
  (worker/cancel.py) or its deadline;
- leases (worker/heartbeat.py, store/leases.py): a running job's lease is renewed every
  heartbeat; any live worker of the model claims a job whose lease ran out and resumes it from its
  checkpoint as a new attempt, or, once TOOLQ_MAX_ATTEMPTS attempts lost their worker, ends it
  as quarantined (store/quarantine.py);
- graceful stop: SIGTERM stops pickup, lets the running job finish for a grace period, then hands
  it back (its lease released at once) without publishing anything half-done.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import structlog

from store import keys
from store.arq_link import StalledPickups, arq_job_id
from store.fair import FairQueue
from store.jobstore import JobStore
from store.journal import Journal
from store.leases import Leases
from toolq.tools import load_tool_modules
from worker.cancel import watch_cancels
from worker.conversation import ConversationLoop
from worker.formats.choice import choose_format
from worker.generation import Engine
from worker.grammar.budget import GrammarBudget
from worker.heartbeat import deregister, heartbeat
from worker.held import HeldConversations, engine_holdings
from worker.jobrun import run_job
from worker.load import report_load
from worker.pickup import Fed, WakeableWorker, make_worker
from worker.settings import WorkerSettings
from worker.sources.registry import RegistrySource
from worker.sources.services import ServiceSource
from worker.state import WorkerState
from worker.templates import ChatTemplate
from worker.toolbox import ToolResolver, ToolSource

log = structlog.get_logger("toolq.worker")


def build_loop(settings: WorkerSettings, engine: Engine, tools: ToolResolver) -> ConversationLoop:
    path = settings.template_path()
    bos, eos = getattr(engine, "bos_token", ""), getattr(engine, "eos_token", "")
    if path is None:
        template = ChatTemplate.from_gguf_metadata(getattr(engine, "metadata", {}), bos_token=bos, eos_token=eos)
    else:
        template = ChatTemplate.from_file(path, bos_token=bos, eos_token=eos)
    choice = choose_format(settings.requested_format, template.source)
    if choice.warning:
        log.warning("tool-call format unknown", format=choice.name, template=template.name, reason=choice.warning)
    log.info("tool-call format", format=choice.name, chosen=choice.how, template=template.name)
    return ConversationLoop(
        engine,
        template,
        choice.format,
        tools,
        tool_timeout_s=settings.tool_timeout_s,
        prompt_variant=settings.prompt_variant,
        grammar_budget=GrammarBudget(
            settings.grammar_max_bytes,
            settings.grammar_build_timeout_s,
            settings.grammar_build_processes,
            settings.grammar_failures_remembered,
        ),
    )


def create_worker(
    settings: WorkerSettings, engine: Engine, *, worker_id: str | None = None, handle_signals: bool = True
) -> WakeableWorker:
    """A worker for this model's queue; ``worker.run()`` serves it until SIGTERM."""
    model = settings.model_name or engine.name
    worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    # "state": WorkerState; "worker": the pickup (WakeableWorker); "mcp": McpSource when MCP servers are named
    holder: dict[str, Any] = {}
    # One job per slot (a job that runs its tools leaves its slot to another job meanwhile), and
    # the interactive reserve: jobs beyond the slots that batch lines never fill.
    slots = engine.stats().slots
    max_jobs = settings.max_jobs if settings.max_jobs is not None else slots + settings.interactive_reserve

    async def startup(redis: Any) -> None:
        registry = load_tool_modules(settings.tool_modules)
        store = JobStore(redis, event_ttl_s=settings.event_ttl_s, stream_maxlen=settings.stream_maxlen)
        # Where calls run, first match wins: this worker's own tools, then its MCP servers, then
        # the tool services registered in Redis.
        sources: list[ToolSource] = [RegistrySource(registry, Journal(redis, ttl_s=settings.effect_journal_ttl_s))]
        if settings.mcp_servers:
            # imported here: a worker that names no server does not pay for importing the MCP SDK
            from toolq.mcp import parse_servers
            from worker.sources.mcp import McpSource

            mcp = await McpSource.start(parse_servers(settings.mcp_servers), reserved=registry.names())
            holder["mcp"] = mcp
            sources.append(mcp)
        services = ServiceSource(redis)
        sources.append(services)
        resolver = ToolResolver(sources)
        state = WorkerState(
            settings=settings,
            engine=engine,
            loop=build_loop(settings, engine, resolver),
            store=store,
            leases=Leases(redis),
            pickups=StalledPickups(redis),
            registry=registry,
            model=model,
            worker_id=worker_id,
            max_jobs=max_jobs,
            held=HeldConversations(engine_holdings(engine.stats()).capacity),
        )
        holder["state"] = state
        state.free_early = holder["worker"].free_early
        if settings.fair_share:
            holder["fair"] = state.fair = FairQueue(redis)
        await report_load(state, force=True)
        state.background.append(asyncio.create_task(heartbeat(state)))
        state.background.append(asyncio.create_task(watch_cancels(state)))
        state.background.append(asyncio.create_task(services.keep_fresh()))
        log.info(
            "worker ready",
            worker_id=worker_id,
            model=model,
            queue=keys.queue(model),
            tools=[t["function"]["name"] for t in resolver.local_specs()],
            gpu=settings.gpu,
        )

    async def shutdown() -> None:
        mcp = holder.get("mcp")
        if mcp is not None:  # its sessions end with their server processes
            await mcp.close()
        state = holder.get("state")
        if state is None:  # startup failed
            return
        for t in state.background:
            t.cancel()
        await asyncio.gather(*state.background, return_exceptions=True)
        await deregister(state)

    async def run(job_id: str, attempt: int) -> str:
        state: WorkerState = holder["state"]
        state.active += 1
        # the load is written beside the start, not ahead of it: a job that fills the worker (an
        # interactive job taking the reserve beside a batch) starts a round trip sooner
        load = asyncio.create_task(report_load(state))
        try:
            return await run_job(state, job_id, attempt)
        finally:
            state.active -= 1
            state.finishing.discard(job_id)
            await load
            await report_load(state)

    async def feed(free: int, take_ms: int) -> Fed:
        fair = holder.get("fair")
        if fair is None:
            return Fed()
        state: WorkerState = holder["state"]
        # the slots the engine has free: batch lines take only these, never the reserve beyond
        # them (the pickup counts a job writing its ending free already: WakeableWorker.free_early)
        slots_free = max(0, slots - (max_jobs - free))
        done = await fair.dispatch_for(model, free, worker=worker_id, slots_free=slots_free, take_ms=take_ms)
        if done.lines_taken or done.spare_left:
            state.lines_seen_s = time.monotonic()
        taken = tuple((arq_job_id(d.job_id, d.attempt), done.score) for d in done.chosen if d.taken)
        offered = sum(d.taken and d.placed == "affinity" for d in done.chosen)
        whole = len(taken) == len(done.chosen)
        if not done.held_until_ms:
            return Fed(lines=done.lines_taken, taken=taken, offered=offered, whole=whole)
        # a job left to another worker: look again when its wait ends (Redis's clock; a few ms of skew)
        again = max(0.0, done.held_until_ms / 1000 - time.time()) + 0.005
        return Fed(again, done.lines_taken, taken, offered, whole)

    worker = holder["worker"] = make_worker(
        model=model,
        worker_id=worker_id,
        redis_url=settings.redis_url,
        run=run,
        on_startup=startup,
        on_shutdown=shutdown,
        max_jobs=max_jobs,
        job_timeout_s=settings.queue_timeout_s,
        poll_delay_s=settings.poll_delay_s,
        wake=settings.wake_on_enqueue,
        shutdown_grace_s=settings.shutdown_grace_s,
        handle_signals=handle_signals,
        feed=feed,
        slots=slots,
    )
    return worker
