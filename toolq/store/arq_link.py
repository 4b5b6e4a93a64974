"""toolq's queue is arq's: every line that knows how arq works inside is in this module.

What toolq relies on, pinned by tests/integration/test_arq_contract.py:

- A queued arq job is two things: the string key ``arq:job:<arq id>`` holding ``serialize_job``'s
  payload and expiring after ``expires_extra_ms``, and the member ``<arq id>`` of the queue's
  sorted set, scored by the unix ms from which it may run. Enqueueing does nothing while
  ``arq:job:<arq id>`` or ``arq:result:<arq id>`` exists.
- The payload is ``serialize_job``'s dict, serialized with msgpack through arq's
  ``job_serializer`` / ``job_deserializer`` hooks: never pickle, so a worker never unpickles bytes
  that someone put in Redis. The job's arguments are ``(job id, attempt)``, a string and an int.
- ``Worker._poll_iteration()`` is the step arq's main loop runs every ``poll_delay``.

arq's public API does the work where it can: ``ArqRedis`` is the client, ``enqueue_job`` enqueues a
resumed attempt, ``Worker``'s ``on_startup`` / ``on_shutdown`` hooks start and stop the worker's
own parts, and arq's health check writes ``keys.health(worker_id)``. Where it cannot:

- Submitting writes the job record, its ``queued`` event, the arq job and a wake token in one
  Lua script (toolq/store/lua/submit.lua), so a job is never queued without its record nor recorded
  without being queued, and an idempotent retry never makes a second job. ``enqueue_job`` is a
  WATCH/MULTI transaction of its own and cannot run inside a script, so toolq/store/lua/arq_enqueue.lua
  writes the same two keys, with the values built here by arq's own ``serialize_job``.
- Under fair share (toolq/store/fair.py) a submitted job's arq job key is written at once but the
  job joins arq's queue only when toolq/store/lua/dispatch.lua chooses it: arq never looks at a
  job key that is not on its queue, and enqueueing later is the same ``ZADD`` enqueue_job does.
  ``WakeableWorker``'s ``feed`` hook asks for those jobs before each look at the queue.
- arq's ``Worker.start_jobs`` takes each job it read off the queue with four round trips (WATCH the
  in-progress key, EXISTS, ZSCORE, MULTI PSETEX EXEC) and an UNWATCH: ``WakeableWorker`` takes the
  whole batch with one script (toolq/store/lua/arq_start.lua) that checks and sets the same key,
  then starts arq's own ``run_job`` for each, as arq does.
- Affinity (toolq/store/affinity.py): the same script skips a job another worker dispatched for
  itself a moment ago and takes this worker's own first, so ``WakeableWorker`` names itself.
- arq offers no way to wake its poll loop, which sleeps ``poll_delay`` (0.5 s by default) between
  looks at the queue: ``WakeableWorker`` overrides the private ``_poll_iteration`` to block on the
  model's wake list instead, which every enqueue pushes to.
- arq's results, retries and timeouts are set aside: a job's result is typed and lives in its
  record; a lost worker's job is taken over through leases (toolq/store/leases.py) within seconds, where
  arq would retry it after ``job_timeout`` + 10 s; the job's own deadline stops it between tokens,
  arq's timeout is only a backstop.
- redis-py: arq 0.28 requires ``redis<6`` in its own metadata, so toolq cannot lift its pin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type hints
import structlog
from arq.connections import ArqRedis
from arq.constants import expires_extra_ms, in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms
from arq.worker import Retry as ArqRetry
from arq.worker import Worker, func
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from toolq.store import keys, redis_urls
from toolq.store.scripts import Script

log = structlog.get_logger("toolq.worker")

RUN_JOB = "run_job"  # the arq function a worker registers; its arguments are (job id, attempt)
WAKE_BACKLOG = 64  # wake tokens a wake list keeps: more than enough to wake every idle worker


def pack(obj: Any) -> bytes:
    """arq's job_serializer for toolq: msgpack, never pickle."""
    return cast(bytes, msgpack.packb(obj, use_bin_type=True, default=str))  # packb always returns bytes


def unpack(data: bytes) -> Any:
    """arq's job_deserializer for toolq."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def connect(url: str, **kwargs: Any) -> ArqRedis:
    """An arq-capable Redis client with toolq's serializer that retries through short outages
    (a Redis restart, a Sentinel failover: toolq/store/redis_urls.py). Any URL redis_urls takes."""
    pool = redis_urls.async_pool(
        url,
        # about 10 s of tries: a restart, or a failover (the sentinels' down-after time plus their
        # election), is ridden out rather than failing the job that was writing
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=14),
        # OSError too: redis-py retries a connect only on the errors listed here, and a connect that Redis
        # refuses while it restarts raises ConnectionRefusedError, so without it nothing rides out a restart
        retry_on_error=[RedisConnectionError, RedisTimeoutError, OSError],
        health_check_interval=15,
        **kwargs,
    )
    client = ArqRedis(pool, job_serializer=pack, job_deserializer=unpack)
    client.auto_close_connection_pool = True  # the pool is this client's alone
    return client


def arq_job_id(job_id: str, attempt: int) -> str:
    """arq's id for one attempt of a job: a resumed attempt is a new arq job."""
    return f"{job_id}:{attempt}"


def arq_job(job_id: str, model: str, attempt: int, now_ms: int) -> dict[str, Any]:
    """What toolq/store/lua/arq_enqueue.lua writes for one attempt, by the names submit.lua takes."""
    arq_id = arq_job_id(job_id, attempt)
    return {
        "arq_job": job_key_prefix + arq_id,
        "arq_result": result_key_prefix + arq_id,
        "queue": keys.queue(model),
        "arq_id": arq_id,
        "payload": serialize_job(RUN_JOB, (job_id, attempt), {}, None, now_ms, serializer=pack),
        "expires_ms": expires_extra_ms,
        "score": now_ms,  # runnable from now on
    }


def stored_job_args() -> dict[str, Any]:
    """What toolq/store/lua/dispatch.lua needs to queue a stored arq job: arq's job key prefix
    and the lifetime the key is renewed to as the job joins the queue."""
    return {"arq_prefix": job_key_prefix, "expires_ms": expires_extra_ms}


async def wake(redis: Any, model: str, token: str) -> None:
    """Wake an idle worker of the model (submit.lua does the same inside its script)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(keys.wake(model), token)
        pipe.ltrim(keys.wake(model), 0, WAKE_BACKLOG - 1)
        await pipe.execute()


async def enqueue_attempt(redis: ArqRedis, job_id: str, model: str, attempt: int) -> None:
    """Queue one attempt of an existing job, unless it is queued already, and wake a worker."""
    await redis.enqueue_job(
        RUN_JOB, job_id, attempt, _job_id=arq_job_id(job_id, attempt), _queue_name=keys.queue(model)
    )
    await wake(redis, model, job_id)


def in_progress_mark_ms(job_timeout_s: float) -> int:
    """How long arq marks a job in progress when a worker picks it: its timeout + 10 s."""
    return int((job_timeout_s + 10) * 1000)


class StalledPickups:
    """Jobs a worker took from the queue but never started (toolq/store/lua/unstall.lua)."""

    def __init__(self, redis: Any):
        self._unstall = Script(redis, "unstall")

    async def release(self, model: str, *, job_timeout_s: float, stall_ms: int) -> list[str]:
        """Hand them to the lease reaper, which runs each as a new attempt (the caller claims
        right after); returns their arq ids."""
        released = await self._unstall(
            queue=keys.queue(model),
            leases=keys.LEASES,
            progress_prefix=in_progress_key_prefix,
            job_prefix=keys.JOB_PREFIX,
            mark_ms=in_progress_mark_ms(job_timeout_s),
            stall_ms=stall_ms,
            limit=200,
        )
        return [r.decode() for r in released]


# ---------------------------------------------------------------------- the worker

JobHandler = Callable[[str, int], Awaitable[str]]
# Given the free slots, puts fairly chosen jobs on the queue; may return the seconds until it
# should be asked again (a job left to another worker stops waiting for it then).
Feeder = Callable[[int], Awaitable[float | None]]


class WakeableWorker(Worker):
    """arq's Worker, woken by enqueuers instead of sleeping a poll, and riding out Redis outages.

    ``wake_key`` None polls as plain arq does (the benchmarks compare the two); ``own_wake_key``
    is this worker's own list, pushed when a job is offered to it first. ``feed``, given the free
    slots, puts the jobs due next on the queue before each look at it (fair share); ``worker_id``
    and ``reserved_key`` let the pickup honour affinity's reservations (toolq/store/affinity.py).
    """

    def __init__(
        self,
        *args: Any,
        wake_key: str | None = None,
        own_wake_key: str | None = None,
        feed: Feeder | None = None,
        worker_id: str,
        reserved_key: str,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.wake_key = wake_key
        self.own_wake_key = own_wake_key
        self.feed = feed
        self.worker_id = worker_id
        self.reserved_key = reserved_key
        self._start: Script | None = None  # toolq/store/lua/arq_start.lua, registered on first use
        self._taken = 0  # jobs start_jobs took in this look at the queue
        self._woken = False  # this look was woken by a wake token (BLPOP)

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's start_jobs in one round trip: take the jobs no worker has in progress (the same
        check and in-progress mark, toolq/store/lua/arq_start.lua), then run each with arq's run_job."""
        free = self.max_jobs - self.job_counter
        if free <= 0 or not job_ids:
            return
        if self._start is None:
            self._start = Script(self.pool, "arq_start")
        taken = await self._start(
            queue=self.queue_name,
            reserved=self.reserved_key,
            progress_prefix=in_progress_key_prefix,
            mark_ms=int(self.in_progress_timeout_s * 1000),
            now_ms=timestamp_ms(),
            arq_ids="\n".join(j.decode() for j in job_ids),
            limit=free,
            asking=self.worker_id,
        )
        self._taken += len(taken) // 2
        for i in range(0, len(taken), 2):
            job_id, score = taken[i].decode(), int(float(taken[i + 1]))
            await self.sem.acquire()  # free: job_counter was below max_jobs for each of them
            self.job_counter += 1
            task = self.loop.create_task(self.run_job(job_id, score))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            self.tasks[job_id] = task

    async def _poll_iteration(self) -> None:
        # arq's poll() sleeps whatever is left of poll_delay after each iteration, so a wake
        # must be served inside the iteration: keep picking and waiting until the step is used up.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.poll_delay_s
        while True:
            self._taken = 0
            again: float | None = None
            try:
                if self.feed is not None and self.allow_pick_jobs and self.job_counter < self.max_jobs:
                    again = await self.feed(self.max_jobs - self.job_counter)
                await super()._poll_iteration()
                await self._drop_spent_tokens()
            except (RedisError, OSError) as e:
                log.warning("queue poll failed; retrying", error=str(e))
                await asyncio.sleep(min(1.0, self.poll_delay_s))
                return
            left = deadline - loop.time()
            if left <= 0 or not self.allow_pick_jobs or self.wake_key is None:
                return  # plain arq: its poll() sleeps the rest of poll_delay
            await self._wait_for_work(left if again is None else max(0.001, min(left, again)))

    async def _drop_spent_tokens(self) -> None:
        """Every enqueue pushes one wake token, so a look that took n jobs leaves behind the
        tokens of the jobs it took (n, less the one that woke it): drop that many of the oldest,
        or each would wake a worker for a look at a queue that no longer holds its job (a wake
        list read, a dispatch and a queue read each). A token dropped in error costs at most a
        poll delay: the loop looks again every ``poll_delay``."""
        spent = self._taken - (1 if self._woken else 0)
        self._woken = False
        if spent > 0 and self.wake_key is not None:
            # redis-py types each command for both clients (a result or an awaitable)
            await cast("Awaitable[bool]", self.pool.ltrim(self.wake_key, 0, -spent - 1))

    async def _wait_for_work(self, timeout: float) -> None:
        """Block until a job may be waiting: a wake token when idle, a finished job when busy."""
        if self.job_counter < self.max_jobs:
            try:
                # redis-py types each command for both clients (a result or an awaitable); BLPOP takes
                # fractional seconds since Redis 6, though redis-py types the timeout as an int.
                lists = [self.own_wake_key, self.wake_key] if self.own_wake_key else [self.wake_key]
                woken = self.pool.blpop(lists, timeout=timeout)  # type: ignore[arg-type]
                self._woken = await cast("Awaitable[list[bytes] | None]", woken) is not None
            except (RedisError, OSError):
                await asyncio.sleep(timeout)
        else:
            busy = [t for t in self.tasks.values() if not t.done()]
            if busy:
                await asyncio.wait(busy, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(min(timeout, 0.01))


class RunAgain(Exception):
    """Raised by a job's run when its start could not be recorded durably (a failover under way):
    arq queues the job again and keeps its job key, as it does for its own ``Retry``. Returning
    instead would let arq finish the job (drop its key and queue entry) while the record, on the
    primary that survives, still says ``queued`` with no lease: a job no one would ever run."""

    def __init__(self, defer_s: float = 0.5):
        super().__init__(f"run again in {defer_s}s")
        self.defer_s = defer_s


def make_worker(
    *,
    model: str,
    worker_id: str,
    redis_url: str,
    run: JobHandler,
    on_startup: Callable[[ArqRedis], Awaitable[None]],
    on_shutdown: Callable[[], Awaitable[None]],
    max_jobs: int,
    job_timeout_s: float,
    poll_delay_s: float,
    wake: bool,
    shutdown_grace_s: float,
    handle_signals: bool = True,
    feed: Feeder | None = None,
) -> WakeableWorker:
    """An arq worker for the model's queue that runs ``run(job id, attempt)`` for each job.

    ``on_startup`` gets the worker's Redis client once arq has connected; ``on_shutdown`` runs when
    arq closes. ``worker.ctx["worker_id"]`` is the id.
    """
    pool = connect(redis_url)
    pool.default_queue_name = keys.queue(model)

    async def run_job(ctx: dict[str, Any], job_id: str, attempt: int) -> str:
        try:
            return await run(job_id, attempt)
        except RunAgain as e:
            raise ArqRetry(defer=e.defer_s) from None

    async def startup(ctx: dict[str, Any]) -> None:
        await on_startup(ctx["redis"])

    async def shutdown(ctx: dict[str, Any]) -> None:
        await on_shutdown()

    worker = WakeableWorker(
        functions=[func(run_job, name=RUN_JOB)],
        queue_name=keys.queue(model),
        redis_pool=pool,
        on_startup=startup,
        on_shutdown=shutdown,
        max_jobs=max_jobs,
        job_timeout=job_timeout_s,
        keep_result=0,  # results live in the job record, typed; arq's would be pickled-shaped
        max_tries=1000,  # attempts are toolq's (leases); an arq retry of a stale attempt is a no-op
        poll_delay=poll_delay_s,
        health_check_interval=5,
        health_check_key=keys.health(worker_id),
        handle_signals=handle_signals,
        job_completion_wait=shutdown_grace_s,
        job_serializer=pack,
        job_deserializer=unpack,
        log_results=False,
        wake_key=keys.wake(model) if wake else None,
        own_wake_key=keys.worker_wake(model, worker_id) if wake else None,
        feed=feed,
        worker_id=worker_id,
        reserved_key=keys.affinity_reserved(model),
    )
    worker.ctx["worker_id"] = worker_id
    return worker
