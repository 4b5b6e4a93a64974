"""toolq's queue is arq's: every line that knows how arq stores a job is in this module, and every
line that knows how arq's worker picks one is in the worker's pickup (worker/pickup.py), the only
module that imports arq.

What toolq relies on, pinned by tests/integration/test_arq_contract.py:

- A queued arq job is two things: the string key ``arq:job:<arq id>`` holding ``serialize_job``'s
  payload and expiring after ``expires_extra_ms``, and the member ``<arq id>`` of the queue's
  sorted set, scored by the unix ms from which it may run. Enqueueing does nothing while
  ``arq:job:<arq id>`` or ``arq:result:<arq id>`` exists.
- The payload is the dict arq's ``serialize_job`` builds (``t``, ``f``, ``a``, ``k``, ``et``),
  serialized with msgpack through arq's ``job_serializer`` / ``job_deserializer`` hooks: never
  pickle, so a worker never unpickles bytes that someone put in Redis. The job's arguments are
  ``(job id, attempt)``, a string and an int. ``job_payload`` builds it byte for byte as arq does.
- The key prefixes and the job key's lifetime are arq's constants, copied here.
- ``Worker._poll_iteration()`` is the step arq's main loop runs every ``poll_delay``.

This module imports no arq: the store, the gateway, the webhook sender and the SDK's Redis mode run
on plain ``redis.asyncio.Redis`` of any redis-py 5 to 8, while arq 0.28 pins ``redis<6`` in its own
metadata. Only the worker's pickup (worker/pickup.py: ``WakeableWorker``, ``make_worker``) imports
arq, so only the worker's extra carries that pin. There, arq's public API does the work where it
can: ``Worker``'s ``on_startup`` / ``on_shutdown`` hooks start and stop the worker's own parts, and
arq's health check writes ``keys.health(worker_id)``. Where it cannot:

- Submitting writes the job record, its ``queued`` event, the arq job and a wake token in one
  Lua script (store/lua/submit.lua), so a job is never queued without its record nor recorded
  without being queued, and an idempotent retry never makes a second job. arq's ``enqueue_job`` is a
  WATCH/MULTI transaction of its own and cannot run inside a script, so store/lua/lib/arq_enqueue.lua
  writes the same two keys, with the values built here; a resumed attempt is enqueued by the same
  snippet (store/lua/arq_enqueue_attempt.lua).
- Under fair share (store/fair.py) a submitted job's arq job key is written at once but the
  job joins arq's queue only when store/lua/dispatch.lua chooses it: arq never looks at a
  job key that is not on its queue, and enqueueing later is the same ``ZADD`` enqueue_job does.
  ``WakeableWorker``'s ``feed`` hook asks for those jobs before each look at the queue.
- arq's ``Worker.start_jobs`` (worker/pickup.py) takes each job it read off the queue with four round trips (WATCH the
  in-progress key, EXISTS, ZSCORE, MULTI PSETEX EXEC) and an UNWATCH: ``WakeableWorker`` takes the
  whole batch with one script (store/lua/arq_start.lua) that checks and sets the same key,
  then starts arq's own ``run_job`` for each, as arq does. The jobs store/lua/dispatch.lua takes
  for the worker skip ``run_job``'s opening read (``WakeableWorker.run_fed``) and end with arq's
  own ``finish_job``.
- Affinity (store/affinity.py): the same script skips a job another worker dispatched for
  itself a moment ago and takes this worker's own first, so ``WakeableWorker`` names itself.
- arq offers no way to wake its poll loop, which sleeps ``poll_delay`` (0.5 s by default) between
  looks at the queue: ``WakeableWorker`` overrides the private ``_poll_iteration`` to block on the
  model's wake list instead, which every enqueue pushes to.
- arq's results, retries and timeouts are set aside: a job's result is typed and lives in its
  record; a lost worker's job is taken over through leases (store/leases.py) within seconds, where
  arq would retry it after ``job_timeout`` + 10 s; the job's own deadline stops it between tokens,
  arq's timeout is only a backstop.
- redis-py: arq 0.28 requires ``redis<6`` in its own metadata. The worker's extra installs arq
  and so redis-py 5; every other room stands on this module and runs on redis-py 5 to 8.
"""

from __future__ import annotations

import time
from typing import Any, cast

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type hints
import redis.asyncio as aioredis
from redis.asyncio.connection import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store import keys, redis_urls
from store.scripts import Script

RUN_JOB = "run_job"  # the arq function a worker registers; its arguments are (job id, attempt)

# arq's constants (arq/constants.py), pinned by tests/integration/test_arq_contract.py
JOB_KEY_PREFIX = "arq:job:"
RESULT_KEY_PREFIX = "arq:result:"
IN_PROGRESS_KEY_PREFIX = "arq:in-progress:"
EXPIRES_EXTRA_MS = 86_400_000  # a job key's lifetime from when it may run: one day


def pack(obj: Any) -> bytes:
    """arq's job_serializer for toolq: msgpack, never pickle."""
    return cast(bytes, msgpack.packb(obj, use_bin_type=True, default=str))  # packb always returns bytes


def unpack(data: bytes) -> Any:
    """arq's job_deserializer for toolq."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def job_payload(job_id: str, attempt: int, enqueue_ms: int) -> bytes:
    """What arq's ``serialize_job(RUN_JOB, (job_id, attempt), {}, None, enqueue_ms, serializer=pack)``
    returns, byte for byte: its dict, in its order, packed with toolq's serializer."""
    return pack({"t": None, "f": RUN_JOB, "a": (job_id, attempt), "k": {}, "et": enqueue_ms})


def retrying_pool(url: str, **kwargs: Any) -> ConnectionPool:
    """A connection pool for any URL redis_urls takes that retries through short outages (a Redis
    restart, a Sentinel failover: store/redis_urls.py). The worker's arq client stands on it too."""
    return redis_urls.async_pool(
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


def connect(url: str, **kwargs: Any) -> aioredis.Redis:
    """The store's Redis client: plain redis-py (5 to 8), on a pool of its own that retries."""
    return aioredis.Redis.from_pool(retrying_pool(url, **kwargs))  # the client closes its pool


def arq_job_id(job_id: str, attempt: int) -> str:
    """arq's id for one attempt of a job: a resumed attempt is a new arq job."""
    return f"{job_id}:{attempt}"


def attempt_of(arq_id: str) -> tuple[str, int]:
    """The job id and attempt an ``arq_job_id`` names."""
    job_id, _, attempt = arq_id.rpartition(":")
    return job_id, int(attempt)


def arq_job(job_id: str, model: str, attempt: int, now_ms: int) -> dict[str, Any]:
    """What store/lua/lib/arq_enqueue.lua writes for one attempt, by the names submit.lua takes."""
    arq_id = arq_job_id(job_id, attempt)
    return {
        "arq_job": JOB_KEY_PREFIX + arq_id,
        "arq_result": RESULT_KEY_PREFIX + arq_id,
        "queue": keys.queue(model),
        "arq_id": arq_id,
        "payload": job_payload(job_id, attempt, now_ms),
        "expires_ms": EXPIRES_EXTRA_MS,
        "score": now_ms,  # runnable from now on
    }


def stored_job_args() -> dict[str, Any]:
    """What store/lua/dispatch.lua needs to queue a stored arq job: arq's job key prefix
    and the lifetime the key is renewed to as the job joins the queue."""
    return {"arq_prefix": JOB_KEY_PREFIX, "expires_ms": EXPIRES_EXTRA_MS}


async def enqueue_attempt(redis: Any, job_id: str, model: str, attempt: int) -> None:
    """Queue one attempt of an existing job, unless it is queued already, and wake a worker: what
    arq's ``enqueue_job`` does, in one script (store/lua/arq_enqueue_attempt.lua)."""
    job = arq_job(job_id, model, attempt, int(time.time() * 1000))
    await Script(redis, "arq_enqueue_attempt")(**job, wake=keys.wake(model), token=job_id)


def in_progress_mark_ms(job_timeout_s: float) -> int:
    """How long arq marks a job in progress when a worker picks it: its timeout + 10 s."""
    return int((job_timeout_s + 10) * 1000)


class JobTaker:
    """A worker's look at arq's queue in one round trip (store/lua/arq_start.lua): of the arq ids
    it read, take those no worker has in progress, marking them as arq's ``start_jobs`` does, this
    worker's own reserved jobs first (store/affinity.py), at most ``limit``."""

    def __init__(self, redis: Any):
        self._start = Script(redis, "arq_start")

    async def take(
        self, queue: str, arq_ids: list[bytes], *, limit: int, asking: str, reserved: str, mark_ms: int, now_ms: int
    ) -> list[tuple[str, int]]:
        """(arq id, score) of each job taken."""
        taken = await self._start(
            queue=queue,
            reserved=reserved,
            progress_prefix=IN_PROGRESS_KEY_PREFIX,
            mark_ms=mark_ms,
            now_ms=now_ms,
            arq_ids="\n".join(j.decode() for j in arq_ids),
            limit=limit,
            asking=asking,
        )
        return [(taken[i].decode(), int(float(taken[i + 1]))) for i in range(0, len(taken), 2)]


class StalledPickups:
    """Jobs a worker took from the queue but never started (store/lua/unstall.lua)."""

    def __init__(self, redis: Any):
        self._unstall = Script(redis, "unstall")

    async def release(self, model: str, *, job_timeout_s: float, stall_ms: int) -> list[str]:
        """Hand them to the lease reaper, which runs each as a new attempt (the caller claims
        right after); returns their arq ids."""
        released = await self._unstall(
            queue=keys.queue(model),
            leases=keys.LEASES,
            progress_prefix=IN_PROGRESS_KEY_PREFIX,
            mark_ms=in_progress_mark_ms(job_timeout_s),
            stall_ms=stall_ms,
            limit=200,
        )
        return [r.decode() for r in released]


RUN_AGAIN_S = 0.5  # how long a job that must run again waits on arq's queue (RunAgain's default)


class RunAgain(Exception):
    """Raised by a job's run when its start could not be recorded durably (a failover under way):
    arq queues the job again and keeps its job key, as it does for its own ``Retry``. Returning
    instead would let arq finish the job (drop its key and queue entry) while the record, on the
    primary that survives, still says ``queued`` with no lease: a job no one would ever run."""

    def __init__(self, defer_s: float = RUN_AGAIN_S):
        super().__init__(f"run again in {defer_s}s")
        self.defer_s = defer_s
