"""The heartbeat: keep this worker's fleet entry and its jobs' leases fresh, stand a job down
when another attempt took it over, and resume the jobs of workers that died (or end them, once
their attempts were lost too often)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from contextlib import suppress

import structlog

from store import affinity, arq_link, fleet, pauses, quarantine
from store.errors import RedisError
from store.fleet import WorkerInfo
from toolq.wire.protocol import now_ms
from worker.endings import StopCause
from worker.held import engine_holdings
from worker.load import report_load
from worker.state import WorkerState

log = structlog.get_logger("toolq.worker")

PRUNE_EVERY = 20  # beats between sweeps of the fleet for workers that died without saying goodbye
UNSTALL_EVERY = 4  # beats between looks for jobs a lost worker took from the queue but never started
# A pickup is a few milliseconds; one that has not started after this is run as a new attempt
# (unstall.lua), which fences the old picker off, so a slow one is only wasted work, never a repeat.
STALL_MS = 3_000
EXPIRE_EVERY = 4  # beats between sweeps for paused jobs whose caller missed the deadline


async def heartbeat(state: WorkerState) -> None:
    """Beat every ``heartbeat_ms`` until cancelled; a failed beat is logged and retried."""
    s = state.settings
    every = s.heartbeat_ms / 1000
    ttl_ms = state.registry_ttl_ms
    tools = tuple(state.loop.tools.local_specs())
    limit = max(2 * s.lease_ms / 1000, 2.0)
    while True:
        try:
            # a beat that hangs on a Redis call would stop every renewal and claim after it
            await asyncio.wait_for(beat(state, tools, ttl_ms), limit)
        except asyncio.TimeoutError:
            log.warning("heartbeat timed out; retrying", limit_s=limit)
        except RedisError as e:
            log.warning("heartbeat failed", error=str(e))
        except Exception as e:  # never let the heartbeat die quietly
            log.error("heartbeat error", error=repr(e))
        await asyncio.sleep(every)


async def beat(state: WorkerState, tools: tuple[dict, ...], ttl_ms: int) -> None:
    s, redis = state.settings, state.store.redis
    stats = state.engine.stats()
    rates = state.engine_watch.update(stats, time.monotonic())
    holdings = engine_holdings(stats)
    state.held.resize(holdings.capacity)
    await fleet.register(
        redis,
        WorkerInfo(
            id=state.worker_id,
            model=state.model,
            tools=tools,
            gpu=s.gpu,
            heartbeat_ms=now_ms(),
            busy=len(state.running),
            jobs_done=state.jobs_done,
            max_jobs=state.max_jobs,
            host=socket.gethostname(),
            pid=os.getpid(),
            slots=stats.slots,
            slots_busy=stats.busy,
            batch_size=round(rates.batch_size, 2),
            prefill_tps=round(rates.prefill_tps, 1),
            decode_tps=round(rates.decode_tps, 1),
            prompt_tokens=stats.prompt_tokens,
            cached_tokens=stats.cached_tokens,
            format=state.loop.fmt.name,
            template=state.loop.template.name,
            cache_conversations=len(state.held),
            cache_bytes=holdings.tier_bytes,
        ),
        ttl_ms,
    )
    await state.held.publish(redis, state.worker_id, ttl_ms, whole=True)
    await report_load(state, force=True)  # mends a write a Redis outage lost (worker/load.py)
    for running in list(state.running.values()):
        if running.task.done():
            continue
        if not await state.leases.renew(running.job_id, running.attempt, s.lease_ms):
            # another worker took the job over (our lease ran out): stop without publishing
            running.interrupt(StopCause.superseded)
    state.beats += 1
    if state.beats % PRUNE_EVERY == 1:
        live = await fleet.read_fleet(redis, prune=True)  # reading drops members whose hash expired
        await affinity.prune_load(redis, state.model, {w.id for w in live.workers})
    if state.pickups is not None and state.beats % UNSTALL_EVERY == 0:
        # a job taken by a worker that died before starting it (so before it took a lease): given
        # a lease that has run out, so the claim below runs it as a new attempt
        released = await state.pickups.release(state.model, job_timeout_s=s.queue_timeout_s, stall_ms=STALL_MS)
        for arq_id in released:
            log.warning("releasing a job a lost worker took but never started", arq_id=arq_id)
    claims = await state.leases.claim_expired(state.model, grace_ms=s.lease_ms * 3, max_attempts=s.max_attempts)
    for job_id, attempt, poisoned in claims:
        if poisoned:
            # its attempts kept losing their worker: ended, never run again (store/quarantine.py)
            if await quarantine.end_lost(state.store, job_id, attempt):
                log.error("quarantined a job whose workers kept being lost", job_id=job_id, attempt=attempt)
            continue
        log.warning("resuming job of a lost worker", job_id=job_id, attempt=attempt)
        await arq_link.enqueue_attempt(redis, job_id, state.model, attempt)
    if state.beats % EXPIRE_EVERY == 2:
        for job_id in await pauses.expire_overdue(state.store):
            log.info("paused job ran past its action deadline", job_id=job_id)


async def deregister(state: WorkerState) -> None:
    """Leave the fleet on a clean stop (best effort: an entry left behind expires anyway)."""
    with suppress(RedisError):
        await fleet.deregister(state.store.redis, state.worker_id)
        await affinity.forget_worker(state.store.redis, state.model, state.worker_id)
