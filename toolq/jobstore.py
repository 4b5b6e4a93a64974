"""Jobs in Redis: the one place that writes job records and events and reads them back.

The gateway, the SDK's direct mode and the worker all go through JobStore, so the invariants
live in one spot:

- every event is written by one Lua script that allocates the next ``seq``, appends to the
  job's stream (id ``<seq>-0``), publishes on both channels and updates the record, atomically;
- a job has exactly one terminal event: once one is written, every later write is refused;
- a write can be fenced by attempt number, so a worker whose job was taken over (its lease ran
  out) can never publish into the resumed job.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Optional

from arq.connections import ArqRedis
from arq.constants import expires_extra_ms as arq_expires_extra_ms
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from redis.asyncio import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from toolq import codec, keys
from toolq.protocol import (
    TERMINAL_EVENTS,
    ErrorInfo,
    Event,
    EventType,
    JobRequest,
    JobResult,
    JobStatus,
    new_job_id,
    now_ms,
)

RUN_JOB = "run_job"  # the arq function name workers register

# KEYS: 1 job hash, 2 stream, 3 job channel, 4 all-jobs channel, 5 leases
# ARGV: 1 event head, 2 event tail (the script puts seq between), 3 terminal 0/1,
#       4 attempt ('0': unfenced), 5 only-if-status ('' any), 6 new status ('' keep),
#       7 result json, 8 checkpoint json ('' keep), 9 stream maxlen, 10 ttl s, 11 job id,
#       12 lease ms from now on Redis's clock ('' leave), 13 now ms
# Leases are measured on Redis's clock, the one clock every worker shares: worker clocks may be
# skewed or jump (a paused VM), which would otherwise read as an expired lease.
_NOW = """
local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

_EMIT = _NOW + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -3 end
local h = redis.call('HMGET', KEYS[1], 'terminal', 'attempt', 'status')
if h[1] == '1' then return 0 end
if ARGV[4] ~= '0' and h[2] ~= ARGV[4] then return -1 end
if ARGV[5] ~= '' and h[3] ~= ARGV[5] then return -2 end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local ev = ARGV[1] .. seq .. ARGV[2]
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], seq .. '-0', 'e', ev)
redis.call('PUBLISH', KEYS[3], ev)
redis.call('PUBLISH', KEYS[4], ev)
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'status', ARGV[6]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'checkpoint', ARGV[8]) end
if ARGV[12] ~= '' then redis.call('ZADD', KEYS[5], redis_now_ms() + tonumber(ARGV[12]), ARGV[11]) end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'terminal', '1', 'result', ARGV[7], 'finished_ms', ARGV[13])
  redis.call('ZREM', KEYS[5], ARGV[11])
  redis.call('EXPIRE', KEYS[1], ARGV[10])
  redis.call('EXPIRE', KEYS[2], ARGV[10])
end
return seq
"""

# Enqueue an arq job the way arq's enqueue_job stores it (payload built by arq's own
# serialize_job), unless one with that id exists, and wake an idle worker.
# KEYS: arq job key, arq result key, queue, wake list. ARGV (from ENQ): payload, expires ms, score,
# arq job id, wake token.
_ENQUEUE_FN = """
local function enqueue(k_job, k_result, k_queue, k_wake, payload, expires, score, arq_id, token)
  if redis.call('EXISTS', k_job, k_result) == 0 then
    redis.call('PSETEX', k_job, expires, payload)
    redis.call('ZADD', k_queue, score, arq_id)
  end
  redis.call('LPUSH', k_wake, token)
  redis.call('LTRIM', k_wake, 0, 63)
end
"""

_ENQUEUE = _ENQUEUE_FN + """
enqueue(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
"""

# A whole submission in one round trip: idempotency, the record, the `queued` event, the job.
# KEYS: 1 job hash, 2 stream, 3 job channel, 4 all channel, 5 arq job, 6 arq result, 7 queue,
#       8 wake, 9 idempotency key. ARGV: 1 job id, 2 request json, 3 model, 4 tenant,
#       5 created ms, 6 event head, 7 event tail, 8 stream maxlen, 9 payload, 10 expires ms,
#       11 score, 12 arq job id, 13 idempotency ttl ('' none), 14 job key prefix.
_SUBMIT = _ENQUEUE_FN + """
if ARGV[13] ~= '' then
  local existing = redis.call('GET', KEYS[9])
  if existing and redis.call('EXISTS', ARGV[14] .. '{' .. existing .. '}') == 1 then
    return {0, existing}
  end
  redis.call('SET', KEYS[9], ARGV[1], 'EX', ARGV[13])
end
redis.call('HSET', KEYS[1], 'request', ARGV[2], 'model', ARGV[3], 'tenant', ARGV[4], 'status', 'queued',
           'attempt', 1, 'seq', 1, 'created_ms', ARGV[5])
local ev = ARGV[6] .. '1' .. ARGV[7]
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[8], '1-0', 'e', ev)
redis.call('PUBLISH', KEYS[3], ev)
redis.call('PUBLISH', KEYS[4], ev)
enqueue(KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[1])
return {1, ARGV[1]}
"""

# Take over every job of a model whose lease ran out. KEYS: 1 leases.
# ARGV: 1 model, 2 job-hash key prefix, 3 grace ms for the new attempt to start, 4 max jobs.
# Returns {job id, new attempt, ...}. The grace lease means a claim whose enqueue never happens
# (the claimer died in between) is claimed again, not lost.
_CLAIM = _NOW + """
local now = redis_now_ms()
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))) do
  local job = ARGV[2] .. '{' .. id .. '}'
  local h = redis.call('HMGET', job, 'terminal', 'model')
  if h[1] == '1' or not h[2] then
    redis.call('ZREM', KEYS[1], id)
  elseif h[2] == ARGV[1] then
    local attempt = redis.call('HINCRBY', job, 'attempt', 1)
    redis.call('HSET', job, 'status', 'queued')
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), id)
    table.insert(out, id)
    table.insert(out, attempt)
  end
end
return out
"""

# Extend a running job's lease, but only while this attempt still owns the job.
# KEYS: 1 leases, 2 job hash. ARGV: 1 job id, 2 attempt, 3 lease ms.
_RENEW = _NOW + """
local h = redis.call('HMGET', KEYS[2], 'attempt', 'terminal')
if h[1] ~= ARGV[2] or h[2] == '1' then return 0 end
redis.call('ZADD', KEYS[1], redis_now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
"""


class JobNotFound(KeyError):
    pass


class JobEnded(Exception):
    """A write was refused: the job already ended, or a newer attempt owns it."""

    def __init__(self, job_id: str, reason: str):
        super().__init__(f"job {job_id}: {reason}")
        self.reason = reason


_REFUSED = {0: "already ended", -1: "taken over by a newer attempt", -2: "not in the expected state",
            -3: "no such job"}

_STATUS_OF_TERMINAL = {
    EventType.final: JobStatus.succeeded,
    EventType.error: JobStatus.failed,
    EventType.cancelled: JobStatus.cancelled,
}


def connect(url: str, **kwargs: Any) -> ArqRedis:
    """An arq-capable Redis client that retries through short outages (a Redis restart)."""
    pool = ConnectionPool.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=8),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        health_check_interval=15,
        **kwargs,
    )
    return ArqRedis(pool, job_serializer=codec.pack, job_deserializer=codec.unpack)


def _event_parts(job_id: str, type: EventType, data: Optional[dict[str, Any]], ts: int) -> tuple[str, str]:
    """An event's JSON around its seq, which the script that writes it allocates."""
    head = '{"job_id":' + json.dumps(job_id) + ',"seq":'
    tail = (',"type":"' + type.value + '","ts":' + str(ts) + ',"data":'
            + json.dumps(data or {}, ensure_ascii=False, separators=(",", ":"), default=str) + "}")
    return head, tail


def _decode(h: dict) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in h.items()}


class JobStore:
    def __init__(self, redis: ArqRedis, *, event_ttl_s: int = 24 * 3600, stream_maxlen: int = 10_000,
                 idempotency_ttl_s: int = 24 * 3600):
        self.redis = redis
        self.event_ttl_s = event_ttl_s
        self.stream_maxlen = stream_maxlen
        self.idempotency_ttl_s = idempotency_ttl_s
        self._emit = redis.register_script(_EMIT)
        self._claim = redis.register_script(_CLAIM)
        self._renew = redis.register_script(_RENEW)
        self._submit = redis.register_script(_SUBMIT)
        self._enqueue = redis.register_script(_ENQUEUE)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "JobStore":
        return cls(connect(url), **kwargs)

    async def close(self) -> None:
        await self.redis.aclose()

    # ------------------------------------------------------------------ submitting

    async def submit(self, request: JobRequest, *, model: str, tenant: str = "default",
                     idempotency_key: Optional[str] = None) -> tuple[str, bool]:
        """Record, announce (``queued``) and enqueue a job, in one script. Returns (job id, created).

        With an idempotency key, the same key from the same tenant returns the first job while it
        exists (a key whose job has expired starts a new one).
        """
        job_id = new_job_id()
        key = idempotency_key or request.idempotency_key
        created = now_ms()
        head, tail = _event_parts(job_id, EventType.queued, {"model": model, "attempt": 1}, created)
        payload, expires, arq_id = self._arq_job(job_id, 1, created)
        created_new, returned = await self._submit(
            keys=[keys.job(job_id), keys.log(job_id), keys.events_channel(job_id), keys.EVENTS_ALL,
                  job_key_prefix + arq_id, result_key_prefix + arq_id, keys.queue(model), keys.wake(model),
                  keys.idempotency(tenant, key) if key else keys.idempotency(tenant, "-")],
            args=[job_id, request.model_dump_json(), model, tenant, created, head, tail, self.stream_maxlen,
                  payload, expires, created, arq_id, self.idempotency_ttl_s if key else "", keys.JOB_PREFIX],
        )
        return (returned.decode() if isinstance(returned, bytes) else returned), bool(created_new)

    @staticmethod
    def _arq_job(job_id: str, attempt: int, now: int) -> tuple[bytes, int, str]:
        """(payload, expiry ms, arq id) of one attempt, serialized by arq itself."""
        payload = serialize_job(RUN_JOB, (job_id, attempt), {}, None, now, serializer=codec.pack)
        return payload, arq_expires_extra_ms, keys.arq_job_id(job_id, attempt)

    async def enqueue_attempt(self, job_id: str, model: str, attempt: int) -> None:
        payload, expires, arq_id = self._arq_job(job_id, attempt, now_ms())
        await self._enqueue(keys=[job_key_prefix + arq_id, result_key_prefix + arq_id, keys.queue(model),
                                  keys.wake(model)],
                            args=[payload, expires, now_ms(), arq_id, job_id])

    # ------------------------------------------------------------------ events

    async def emit(self, job_id: str, type: EventType, data: Optional[dict[str, Any]] = None, *,
                   attempt: int = 0, status: Optional[JobStatus] = None, result: Optional[JobResult] = None,
                   checkpoint: Optional[dict[str, Any]] = None, only_if_status: Optional[JobStatus] = None,
                   lease_ms: Optional[int] = None) -> int:
        """Write one event; returns its seq. Raises JobEnded when the write is refused."""
        terminal = type in TERMINAL_EVENTS
        if terminal and status is None:
            status = _STATUS_OF_TERMINAL[type]
        ts = now_ms()
        head, tail = _event_parts(job_id, type, data, ts)
        seq = await self._emit(
            keys=[keys.job(job_id), keys.log(job_id), keys.events_channel(job_id), keys.EVENTS_ALL, keys.LEASES],
            args=[head, tail, int(terminal), attempt, only_if_status.value if only_if_status else "",
                  status.value if status else "", result.model_dump_json() if result else "",
                  json.dumps(checkpoint, ensure_ascii=False, default=str) if checkpoint is not None else "",
                  self.stream_maxlen, self.event_ttl_s, job_id,
                  "" if lease_ms is None else lease_ms, ts],
        )
        if seq <= 0:
            raise JobEnded(job_id, _REFUSED[seq])
        return seq

    async def events(self, job_id: str, after: int = 0, count: Optional[int] = None) -> list[Event]:
        """The job's events with seq > after, from its stream."""
        raw = await self.redis.xrange(keys.log(job_id), min=f"({after}-0" if after else "-", max="+", count=count)
        if not raw and not await self.redis.exists(keys.job(job_id)):
            raise JobNotFound(job_id)
        return [Event.model_validate_json(fields[b"e"]) for _, fields in raw]

    async def follow(self, job_id: str, after: int = 0, *, idle_s: float = 15.0,
                     ticks: bool = False) -> AsyncIterator[Optional[Event]]:
        """Replay events after ``after``, then follow live until the terminal event.

        Reading the stream with XREAD BLOCK from the last seq seen is gap-free and never repeats
        an event, across replay and live alike. With ticks=True, yields None after each idle
        ``idle_s`` (the gateway sends keep-alives then).
        """
        last = after
        replayed = await self.events(job_id, after)
        for ev in replayed:
            yield ev
            last = ev.seq
            if ev.terminal:
                return
        if not replayed and await self.redis.hget(keys.job(job_id), "terminal") == b"1":
            return  # asked for events after the terminal one: there will be none
        stream = keys.log(job_id)
        while True:
            got = await self.redis.xread({stream: f"{last}-0"}, block=int(idle_s * 1000), count=100)
            if not got:
                if not await self.redis.exists(keys.job(job_id)):
                    raise JobNotFound(job_id)
                if ticks:
                    yield None
                continue
            for _, entries in got:
                for _, fields in entries:
                    ev = Event.model_validate_json(fields[b"e"])
                    yield ev
                    last = ev.seq
                    if ev.terminal:
                        return

    # ------------------------------------------------------------------ records

    async def record(self, job_id: str) -> dict[str, str]:
        h = await self.redis.hgetall(keys.job(job_id))
        if not h:
            raise JobNotFound(job_id)
        return _decode(h)

    async def request(self, job_id: str) -> JobRequest:
        return JobRequest.model_validate_json((await self.record(job_id))["request"])

    async def status(self, job_id: str) -> JobStatus:
        raw = await self.redis.hget(keys.job(job_id), "status")
        if raw is None:
            raise JobNotFound(job_id)
        return JobStatus(raw.decode())

    async def result(self, job_id: str) -> Optional[JobResult]:
        raw = await self.redis.hget(keys.job(job_id), "result")
        if raw is None and not await self.redis.exists(keys.job(job_id)):
            raise JobNotFound(job_id)
        return JobResult.model_validate_json(raw) if raw else None

    async def wait_result(self, job_id: str, timeout: Optional[float] = None) -> JobResult:
        """Wait for the terminal event and return the stored result."""
        async def _wait() -> JobResult:
            async for ev in self.follow(job_id):
                if ev is not None and ev.terminal:
                    break
            res = await self.result(job_id)
            assert res is not None, "a terminal event is always written with its result"
            return res

        return await asyncio.wait_for(_wait(), timeout)

    # ------------------------------------------------------------------ cancel

    async def cancel(self, job_id: str) -> JobStatus:
        """Cancel a job. A queued job ends at once; a running one is stopped by its worker,
        which watches the cancel key between tokens. Returns the status seen."""
        rec = await self.record(job_id)
        if rec.get("terminal") == "1":
            return JobStatus(rec["status"])
        await self.redis.set(keys.cancel(job_id), 1, ex=self.event_ttl_s)
        result = JobResult(job_id=job_id, status=JobStatus.cancelled, finish_reason="cancelled",
                           attempt=int(rec.get("attempt", 1)),
                           messages=JobRequest.model_validate_json(rec["request"]).messages)
        try:
            await self.emit(job_id, EventType.cancelled, {"reason": "cancelled while queued"},
                            result=result, only_if_status=JobStatus.queued)
            return JobStatus.cancelled
        except JobEnded:
            return await self.status(job_id)

    async def cancel_requested(self, job_id: str) -> bool:
        return bool(await self.redis.exists(keys.cancel(job_id)))

    # ------------------------------------------------------------------ leases (worker side)

    async def renew_lease(self, job_id: str, attempt: int, lease_ms: int) -> bool:
        return bool(await self._renew(keys=[keys.LEASES, keys.job(job_id)], args=[job_id, attempt, lease_ms]))

    async def claim_expired(self, model: str, grace_ms: int, limit: int = 100) -> list[tuple[str, int]]:
        """Take over every job of this model whose lease ran out; returns (job id, new attempt).

        The caller enqueues each new attempt. The claim leaves a lease of ``grace_ms`` so that, if
        the caller dies before enqueueing, the job is claimed again rather than lost.
        """
        flat = await self._claim(keys=[keys.LEASES], args=[model, keys.JOB_PREFIX, grace_ms, limit])
        return [(flat[i].decode(), int(flat[i + 1])) for i in range(0, len(flat), 2)]

    async def release_lease(self, job_id: str) -> None:
        """Make a job claimable at once (a worker handing it back on shutdown)."""
        await self.redis.zadd(keys.LEASES, {job_id: 0}, xx=True)


def error_result(job_id: str, code: Any, message: str, *, finish_reason: str = "error",
                 **fields: Any) -> JobResult:
    """A typed failure result (never a pickled exception)."""
    return JobResult(job_id=job_id, status=JobStatus.failed, finish_reason=finish_reason,
                     error=ErrorInfo(code=code, message=message), **fields)
