"""Jobs in Redis: the one place that writes job records and events and reads them back.

The gateway, the SDK's direct mode and the worker all go through JobStore, so the invariants
live in one spot:

- every event is written by one Lua script (store/lua/emit.lua, or job_event.lua for an event
  that touches only its job's keys; both share event_write.lua) that allocates the next ``seq``,
  appends to the job's stream (id ``<seq>-0``), publishes on both channels and updates the record,
  atomically;
- a job has exactly one terminal event: once one is written, every later write is refused;
- a write can be fenced by attempt number, so a worker whose job was taken over (its lease ran
  out: store/leases.py) can never publish into the resumed job;
- a submission, idempotency included, is one script too (store/lua/submit.lua);
- a paused job's answers are recorded, and the job resumed once all are in, by one script
  (store/lua/answer.lua), so a call is answered at most once and a refusal changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from store import affinity, arq_link, budget_holds, byte_quota, deliveries, keys
from store.admission import NotSubmitted, QueueAtLimit, QueueBounds, TenantQueueAtLimit, refusal
from store.arq_link import connect
from store.durability import Durability
from store.job_index import INDEX_KEEP
from store.records import JobRecord
from store.scripts import Script
from store.submission import Submission
from store.thread_ending import ending_messages
from toolq.errors import (
    AlreadyAnswered,
    Conflict,
    InvalidRequest,
    JobAlreadyEnded,
    NotPaused,
    UnknownToolCall,
    WrongActionKind,
)
from toolq.wire.payloads import CancelledData, QueuedData, RequiresActionData
from toolq.wire.protocol import (
    TERMINAL_EVENTS,
    ActionKind,
    Event,
    EventType,
    JobRequest,
    JobResult,
    JobStatus,
    PendingAction,
    Usage,
    new_job_id,
    now_ms,
)

__all__ = [
    "JobEnded",
    "JobNotFound",
    "JobStore",
    "NotSubmitted",
    "QueueAtLimit",
    "QueueBounds",
    "TenantQueueAtLimit",
    "connect",
]


class JobNotFound(KeyError):
    pass


class JobEnded(Exception):
    """A write was refused: the job already ended, or a newer attempt owns it."""

    def __init__(self, job_id: str, reason: str):
        super().__init__(f"job {job_id}: {reason}")
        self.reason = reason

    @property
    def taken_from_writer(self) -> bool:
        """The writer's attempt lost the job: it ended elsewhere, or a newer attempt owns it."""
        return self.reason in (_REFUSED[0], _REFUSED[-1])


_REFUSED = {0: "already ended", -1: "taken over by a newer attempt", -2: "not in the expected state", -3: "no such job"}

_STATUS_OF_TERMINAL = {
    EventType.final: JobStatus.succeeded,
    EventType.error: JobStatus.failed,
    EventType.cancelled: JobStatus.cancelled,
}


def _event_parts(job_id: str, type: EventType, data: dict[str, Any] | None, ts: int) -> tuple[str, str]:
    """An event's JSON around its seq, which the script that writes it allocates."""
    head = '{"job_id":' + json.dumps(job_id) + ',"seq":'
    tail = (
        ',"type":"'
        + type.value
        + '","ts":'
        + str(ts)
        + ',"data":'
        + json.dumps(data or {}, ensure_ascii=False, separators=(",", ":"), default=str)
        + "}"
    )
    return head, tail


_WAITS_ON = {"client": "a tool result", "approval": "an approval"}
_ENDPOINT = {"client": "tool_results", "approval": "approvals"}


def _check_paused(job_id: str, ended: bool, status: str) -> None:
    if ended:
        raise JobAlreadyEnded(f"job {job_id} has ended ({status}); it takes no more answers", field="job_id")
    if status != JobStatus.requires_action.value:
        raise NotPaused(
            f"job {job_id} is {status}, not waiting on its caller (status requires_action); there is nothing to answer",
            field="job_id",
        )


def _answered(
    job_id: str, actions: dict[str, dict[str, Any]], answers: Sequence[tuple[str, dict[str, Any]]], kind: ActionKind
) -> dict[str, dict[str, Any]]:
    """The job's actions with the answers recorded; raises on the first answer that cannot be."""
    seen: set[str] = set()
    for i, (call_id, answer) in enumerate(answers):
        field = f"[{i}].tool_call_id"
        action = actions.get(call_id)
        if call_id in seen:
            raise InvalidRequest(f"tool_call_id {call_id!r} is answered twice in this post", field=field)
        if action is None:
            waits = ", ".join(repr(c) for c, a in actions.items() if a.get("answer") is None) or "nothing"
            raise UnknownToolCall(
                f"tool_call_id {call_id!r} is not a call job {job_id} waits on; it waits on: {waits}", field=field
            )
        theirs = str(action.get("kind"))
        if theirs != kind:
            raise WrongActionKind(
                f"call {call_id!r} (tool {action.get('name')!r}) waits on {_WAITS_ON.get(theirs, theirs)}, not on "
                f"{_WAITS_ON[kind]}: post it to /v1/jobs/{job_id}/{_ENDPOINT.get(theirs, theirs)}",
                field=field,
            )
        if action.get("answer") is not None:
            raise AlreadyAnswered(f"call {call_id!r} of job {job_id} was already answered", field=field)
        seen.add(call_id)
        actions[call_id] = {**action, "answer": answer}
    return actions


class JobStore:
    def __init__(
        self,
        redis: Any,
        *,
        event_ttl_s: int = 24 * 3600,
        stream_maxlen: int = 10_000,
        idempotency_ttl_s: int = 24 * 3600,
        fair: bool = False,
        durability: Durability | None = None,
        affinity_wait_ms: int = affinity.DEFAULT_WAIT_MS,
        bounds: QueueBounds | None = None,
    ):
        self.redis = redis  # from store.arq_link.connect
        # the queue bounds every submission through this store passes (store/admission.py):
        # the front doors (the gateway, the SDK's Redis mode) give them; none for the store alone
        self.bounds = bounds or QueueBounds()
        self.event_ttl_s = event_ttl_s
        self.stream_maxlen = stream_maxlen
        self.idempotency_ttl_s = idempotency_ttl_s
        # fair share (store/fair.py): jobs wait per tenant until dispatch.lua queues them;
        # off, they go straight onto arq's queue, first in first out. The front doors (the
        # gateway, the SDK's Redis mode) turn it on; the store alone is arq's plain queue.
        self.fair = fair
        self.index_keep = INDEX_KEEP  # jobs each recent-jobs index keeps (store/job_index.py)
        # which acknowledgements wait for replicas (TOOLQ_REDIS_WAIT_REPLICAS): store/durability.py
        self.durability = durability or Durability.from_settings()
        # affinity (store/affinity.py): how long a job is left to the worker that holds its
        # conversation before any worker may take it; 0 offers jobs to no worker first
        self.affinity_wait_ms = affinity_wait_ms if fair else 0
        self._emit = Script(redis, "emit")
        self._job_event = Script(redis, "job_event")
        self._start = Script(redis, "start")
        self._pause = Script(redis, "pause")
        self._submit = Script(redis, "submit")
        self._answer = Script(redis, "answer")

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> JobStore:
        return cls(connect(url), **kwargs)

    async def close(self) -> None:
        await self.redis.aclose()

    # ------------------------------------------------------------------ submitting

    async def submit(self, sub: Submission) -> tuple[str, bool]:
        """Record, announce (``queued``) and enqueue a job, in one script. Returns (job id, created).

        With an idempotency key (``sub.idempotency_key``, else the request's), the same key from the
        same tenant returns the first job while it exists, before anything else is checked (a key
        whose job has expired starts a new one). Raises QueueAtLimit (TenantQueueAtLimit for the
        tenant's own limit) when the store's queue bounds refuse it (store/admission.py), and
        BudgetExhausted when the policy's token budgets have no room left for it, and
        StoreQuotaExceeded when the tenant keeps its quota of bytes (store/byte_quota.py); otherwise
        the job reserves its token ceiling against them in the same step (store/budget_holds.py).
        With ``sub.model`` None it only hands back the job the key names, and raises NotSubmitted
        when there is none. The parts of ``sub`` are described in store/submission.py.
        """
        request, model, tenant = sub.request, sub.model, sub.tenant
        key = sub.idempotency_key or request.idempotency_key
        policy = sub.policy or (self.bounds.policy(tenant) if self.bounds.tenants else None)
        admission = self.bounds.script_args(tenant, sub.max_queue_depth)
        if model is None and not key:
            raise NotSubmitted("no model and no idempotency key")
        job_id = new_job_id()
        created = now_ms()
        queued = QueuedData(model=model, attempt=1)
        if sub.unserved_waiting is not None:
            queued = QueuedData(model=model, attempt=1, workers=0, waiting=sub.unserved_waiting)
        head, tail = _event_parts(job_id, EventType.queued, queued.to_wire(), created)
        (code, value, *rest), acked = await self.durability.write(
            self.redis,
            self._submit,
            job=keys.job(job_id),
            log=keys.log(job_id),
            job_channel=keys.events_channel(job_id),
            all_channel=keys.EVENTS_ALL,
            idempotency=keys.idempotency(tenant, key or "-"),
            wake=keys.wake(model or ""),
            spare_wake=keys.spare_wake(model or ""),
            job_id=job_id,
            request=request.model_dump_json(),
            model=model,
            tenant=tenant,
            created_ms=created,
            head=head,
            tail=tail,
            maxlen=self.stream_maxlen,
            idempotency_ttl_s=self.idempotency_ttl_s if key else None,
            **admission,
            webhook=request.webhook.model_dump_json() if request.webhook else None,
            **arq_link.arq_job(job_id, model or "", 1, created),
            **self._fair_keys(model or "", tenant),
            fair=self.fair,
            priority=request.priority,
            weight=policy.weight if policy else None,
            max_running=(policy.max_running or 0) if policy else None,
            job_tokens=policy.job_tokens if policy else None,
            tenant_jobs=keys.tenant_jobs(tenant),
            all_jobs=keys.JOBS_ALL,
            index_keep=self.index_keep,
            traceparent=sub.trace.traceparent if sub.trace else None,
            tracestate=sub.trace.tracestate if sub.trace else None,
            prefer=sub.prefer,
            prefer_wait_ms=self.affinity_wait_ms,
            worker_wake_prefix=keys.worker_wake(model or "", ""),
            **budget_holds.script_args(request, policy),
            **byte_quota.script_args(self.bounds.byte_quota(tenant)),
            spare=sub.spare,
        )
        if code == -2:
            raise NotSubmitted("the idempotency key names no job")
        if code == budget_holds.REFUSED:
            raise budget_holds.refusal(tenant, [code, value, *rest])
        if code == byte_quota.REFUSED:
            raise byte_quota.refusal(tenant, [code, value, *rest])
        if code < 0:
            assert model is not None
            raise refusal(
                int(code), int(value), *map(int, rest), model=model, tenant=tenant, depth=admission["max_depth"]
            )
        found = value.decode() if isinstance(value, bytes) else value
        if self.durability.short(acked) and not (
            # a retry that found its job wrote nothing for WAIT to count: ask about the job itself
            code != 1 and await self.durability.confirm(self.redis, found, seq=1, attempt=None, hold_s=0)
        ):
            raise self.durability.refuse("the submission", found, acked)
        return found, code == 1

    @staticmethod
    def _fair_keys(model: str, tenant: str) -> dict[str, str]:
        return {
            "tenants": keys.fair_tenants(model),
            "passes": keys.fair_passes(model),
            "vtime": keys.fair_vtime(model),
            "waiting": keys.fair_waiting(model, tenant),
            "seq_key": keys.fair_seq(model),
            "weights": keys.TENANT_WEIGHTS,
            "caps": keys.TENANT_CAPS,
        }

    # ------------------------------------------------------------------ events

    async def emit(
        self,
        job_id: str,
        type: EventType,
        data: dict[str, Any] | None = None,
        *,
        attempt: int = 0,
        status: JobStatus | None = None,
        result: JobResult | None = None,
        checkpoint: dict[str, Any] | None = None,
        only_if_status: JobStatus | None = None,
        lease_ms: int | None = None,
        usage: Usage | None = None,
        durable: bool = False,
    ) -> int:
        """Write one event; returns its seq. Raises JobEnded when the write is refused.
        ``usage`` is the job's tokens so far, the worker's own figures: with a terminal event it
        is added to its tenant's usage (store/usage.py); with a checkpoint, what it adds
        since the last count goes into the tenant's minute and day windows at once.
        ``durable``: return only once the replicas asked for have it (store/durability.py),
        confirming for up to the hold time; raises NotReplicated when they never do. An
        attempt's ``started`` goes through ``start``."""
        terminal = type in TERMINAL_EVENTS
        if terminal and status is None:
            status = _STATUS_OF_TERMINAL[type]
        ts = now_ms()
        head, tail = _event_parts(job_id, type, data, ts)
        seq: int
        if not terminal and not durable and lease_ms is None and usage is None and type not in deliveries.WEBHOOK_KIND:
            # touches only the job's own keys (one hash slot): store/lua/job_event.lua
            seq = await self._job_event(
                job=keys.job(job_id),
                log=keys.log(job_id),
                job_channel=keys.events_channel(job_id),
                all_channel=keys.EVENTS_ALL,
                head=head,
                tail=tail,
                attempt=attempt,
                only_if_status=only_if_status.value if only_if_status else None,
                status=status.value if status else None,
                checkpoint=json.dumps(checkpoint, ensure_ascii=False, default=str) if checkpoint is not None else None,
                maxlen=self.stream_maxlen,
            )
            if seq <= 0:
                raise JobEnded(job_id, _REFUSED[seq])
            return seq
        durability = self.durability if durable else Durability()
        seq, acked = await durability.write(
            self.redis,
            self._emit,
            job=keys.job(job_id),
            log=keys.log(job_id),
            job_channel=keys.events_channel(job_id),
            all_channel=keys.EVENTS_ALL,
            leases=keys.LEASES,
            head=head,
            tail=tail,
            terminal=terminal,
            attempt=attempt,
            only_if_status=only_if_status.value if only_if_status else None,
            status=status.value if status else None,
            result=result.model_dump_json() if result else None,
            checkpoint=json.dumps(checkpoint, ensure_ascii=False, default=str) if checkpoint is not None else None,
            maxlen=self.stream_maxlen,
            ttl_s=self.event_ttl_s,
            job_id=job_id,
            lease_ms=lease_ms,
            now_ms=ts,
            prompt_tokens=usage.prompt_tokens if usage and (terminal or checkpoint is not None) else None,
            completion_tokens=usage.completion_tokens if usage and (terminal or checkpoint is not None) else None,
            **deliveries.script_args(job_id, type),
            # a thread run's end also appends to its thread (store/threads.py)
            thread_messages=await ending_messages(self.redis, job_id, type, result) if terminal else None,
        )
        seq = int(seq)
        if seq <= 0:
            raise JobEnded(job_id, _REFUSED[seq])
        if durability.short(acked) and not await durability.confirm(
            self.redis, job_id, seq=seq, attempt=attempt or None
        ):
            raise durability.refuse(f"event {seq} ({type.value})", job_id, acked)
        return seq

    async def start(
        self,
        job_id: str,
        *,
        attempt: int,
        fresh: dict[str, Any],
        resumed: dict[str, Any],
        lease_ms: int,
        worker: str,
    ) -> JobRecord:
        """Write an attempt's ``started`` event and take its lease, and return the record as it
        stands after it (store/lua/start.lua): the worker's start in one round
        trip, with no read of its own before it. ``fresh`` and ``resumed`` are the event's data
        for an attempt that starts afresh and for one that goes on from an earlier attempt or a
        checkpoint; the record decides which. Raises JobEnded when the write is refused (the job
        ended, a newer attempt owns it, or there is no such job), and NotReplicated when the
        replicas asked for never confirm it (store/durability.py): a start that a failover could
        lose must not run."""
        ts = now_ms()
        head, tail_fresh = _event_parts(job_id, EventType.started, fresh, ts)
        _, tail_resumed = _event_parts(job_id, EventType.started, resumed, ts)
        reply, acked = await self.durability.write(
            self.redis,
            self._start,
            job=keys.job(job_id),
            log=keys.log(job_id),
            leases=keys.LEASES,
            job_channel=keys.events_channel(job_id),
            all_channel=keys.EVENTS_ALL,
            head=head,
            fresh=tail_fresh,
            resumed=tail_resumed,
            attempt=attempt,
            maxlen=self.stream_maxlen,
            job_id=job_id,
            lease_ms=lease_ms,
            worker=worker,
        )
        seq = int(reply[0])
        if seq <= 0:
            raise JobEnded(job_id, _REFUSED[seq])
        if self.durability.short(acked) and not await self.durability.confirm(
            self.redis, job_id, seq=seq, attempt=attempt
        ):
            raise self.durability.refuse(f"event {seq} (started)", job_id, acked)
        fields = reply[1:]
        return JobRecord.from_hash(job_id, dict(zip(fields[::2], fields[1::2], strict=True)))

    async def pause(
        self,
        job_id: str,
        *,
        attempt: int,
        pending: list[PendingAction],
        deadline_ms: int,
        checkpoint: dict[str, Any],
    ) -> int:
        """Park a running job until its caller answers (store/lua/pause.lua): the
        ``requires_action`` event, the calls it waits on, and no lease. Raises JobEnded when the
        job ended or a newer attempt owns it."""
        ts = now_ms()
        data = RequiresActionData(calls=pending, deadline_ms=deadline_ms).to_wire()
        head, tail = _event_parts(job_id, EventType.requires_action, data, ts)
        actions = {p.id: {**p.model_dump(mode="json"), "answer": None} for p in pending}
        seq: int = await self._pause(
            job=keys.job(job_id),
            log=keys.log(job_id),
            job_channel=keys.events_channel(job_id),
            all_channel=keys.EVENTS_ALL,
            leases=keys.LEASES,
            paused=keys.PAUSED,
            head=head,
            tail=tail,
            attempt=attempt,
            checkpoint=json.dumps(checkpoint, ensure_ascii=False, default=str),
            actions=json.dumps(actions, ensure_ascii=False, default=str),
            deadline_ms=deadline_ms,
            job_id=job_id,
            maxlen=self.stream_maxlen,
            **deliveries.script_args(job_id, EventType.requires_action),
        )
        if seq <= 0:
            raise JobEnded(job_id, _REFUSED[seq])
        return seq

    async def answer_actions(
        self,
        job_id: str,
        answers: Sequence[tuple[str, dict[str, Any]]],
        kind: ActionKind,
        *,
        tenant: str | None = None,
    ) -> bool:
        """Record the caller's answers to a paused job: (call id, answer) pairs, all of ``kind``.
        When every call it waits on has its answer, the job is queued again as a new attempt and
        resumes from its checkpoint; returns whether it was. Partial answers are kept.

        Refuses, changing nothing: JobNotFound (no such job, or not ``tenant``'s), JobAlreadyEnded,
        NotPaused (queued or running), UnknownToolCall, WrongActionKind, AlreadyAnswered (earlier,
        or twice in ``answers``), and QueueAtLimit when the answers would resume the job and the
        store's queue bounds refuse it, as they would a new job (store/admission.py), or
        BudgetExhausted when its tenant's token budgets have no room in a window the job holds
        nothing in (store/budget_holds.py): the answers are not recorded, so the same post can be
        made again.
        """
        for _ in range(8):  # -4: someone else answered between our read and our write: look again
            rec = await self.record(job_id)
            if tenant is not None and rec.tenant != tenant:
                raise JobNotFound(job_id)
            _check_paused(job_id, rec.terminal, rec.status.value)
            actions = _answered(job_id, dict(rec.actions), answers, kind)
            # each answer its own field: only these are sent and written (answer.lua)
            given = [[call_id, json.dumps(answer, ensure_ascii=False, default=str)] for call_id, answer in answers]
            attempt, model = rec.attempt, rec.model
            ts = now_ms()
            queued = QueuedData(attempt=attempt + 1, resumed=JobStatus.requires_action.value)
            head, tail = _event_parts(job_id, EventType.queued, queued.to_wire(), ts)
            arq = arq_link.arq_job(job_id, model, attempt + 1, ts)
            admission = self.bounds.script_args(rec.tenant)
            policy = self.bounds.policy(rec.tenant) if self.bounds.tenants else None
            (code, value, *rest), acked = await self.durability.write(
                self.redis,
                self._answer,
                job=keys.job(job_id),
                log=keys.log(job_id),
                job_channel=keys.events_channel(job_id),
                all_channel=keys.EVENTS_ALL,
                paused=keys.PAUSED,
                wake=keys.wake(model),
                job_id=job_id,
                tenant=tenant,
                attempt=attempt,
                answers=json.dumps(given, ensure_ascii=False),
                total=len(actions),
                head=head,
                tail=tail,
                maxlen=self.stream_maxlen,
                **arq,
                **self._fair_keys(model, rec.tenant),
                fair=self.fair,
                prefer_wait_ms=self.affinity_wait_ms,
                worker_wake_prefix=keys.worker_wake(model, ""),
                model=model,
                **admission,
                **budget_holds.script_args(rec.request, policy),
                **byte_quota.script_args(self.bounds.byte_quota(rec.tenant)),
            )
            code = int(code)
            if code == budget_holds.REFUSED:  # its token budgets have no room: nothing was written
                raise budget_holds.refusal(rec.tenant, [code, value, *rest])
            if code == byte_quota.REFUSED:  # the answers' bytes pass the tenant's quota: nothing was written
                raise byte_quota.refusal(rec.tenant, [code, value, *rest])
            if code <= -10:  # the queue bounds refused the resumed attempt: nothing was written
                raise refusal(
                    code + 10, int(value), *map(int, rest), model=model, tenant=rec.tenant, depth=admission["max_depth"]
                )
            status = value.decode() if isinstance(value, bytes) else str(value)
            if code == -3:
                raise JobNotFound(job_id)
            if code in (0, -2):
                _check_paused(job_id, code == 0, status)
            if code in (1, 2):
                if self.durability.short(acked):
                    raise self.durability.refuse("the answers", job_id, acked)
                return code == 2
        raise Conflict(f"job {job_id} kept changing while its answers were recorded; retry")

    async def events(self, job_id: str, after: int = 0, count: int | None = None) -> list[Event]:
        """The job's events with seq > after, from its stream."""
        raw = await self.redis.xrange(keys.log(job_id), min=f"({after}-0" if after else "-", max="+", count=count)
        if not raw and not await self.redis.exists(keys.job(job_id)):
            raise JobNotFound(job_id)
        return [Event.model_validate_json(fields[b"e"]) for _, fields in raw]

    async def follow(
        self, job_id: str, after: int = 0, *, idle_s: float = 15.0, ticks: bool = False
    ) -> AsyncIterator[Event | None]:
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

    async def record(self, job_id: str) -> JobRecord:
        h = await self.redis.hgetall(keys.job(job_id))
        if not h:
            raise JobNotFound(job_id)
        return JobRecord.from_hash(job_id, h)

    async def request(self, job_id: str) -> JobRequest:
        return (await self.record(job_id)).request

    async def ended(self, job_ids: list[str]) -> dict[str, bool]:
        """Whether each job has ended, one field of each in one round trip; a job whose record is
        gone is left out (its caller reads it and finds it missing)."""
        if not job_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hmget(keys.job(job_id), "terminal", "status")
            flags = await pipe.execute()
        return {j: terminal == b"1" for j, (terminal, status) in zip(job_ids, flags, strict=True) if status is not None}

    async def status(self, job_id: str) -> JobStatus:
        raw = await self.redis.hget(keys.job(job_id), "status")
        if raw is None:
            raise JobNotFound(job_id)
        return JobStatus(raw.decode())

    async def owner(self, job_id: str) -> str | None:
        """The tenant of a submitted job, None when there is none: one field and whether the request
        is there, never the record itself (which holds the whole conversation)."""
        key = keys.job(job_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            tenant, submitted = await pipe.hget(key, "tenant").hexists(key, "request").execute()
        return (tenant or b"").decode() if submitted else None

    async def statuses(self, job_ids: list[str]) -> list[JobStatus | None]:
        """Each job's status (None for a job whose record is gone), one field each, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for j in job_ids:
                pipe.hget(keys.job(j), "status")
            found = await pipe.execute()
        return [JobStatus(raw.decode()) if raw else None for raw in found]

    async def ping(self) -> None:
        """Raise RedisError unless Redis answers (the gateway's /readyz bounds the wait)."""
        await self.redis.ping()

    async def result(self, job_id: str) -> JobResult | None:
        raw = await self.redis.hget(keys.job(job_id), "result")
        if raw is None and not await self.redis.exists(keys.job(job_id)):
            raise JobNotFound(job_id)
        return JobResult.model_validate_json(raw) if raw else None

    # ------------------------------------------------------------------ cancel

    async def cancel(self, job_id: str) -> JobStatus:
        """Cancel a job. A queued or paused job ends at once; a running one is stopped by its
        worker, which watches the cancel key between tokens. Returns the status seen."""
        rec = await self.record(job_id)
        if rec.terminal:
            return rec.status
        await self.redis.set(keys.cancel(job_id), 1, ex=self.event_ttl_s)
        result = JobResult(
            job_id=job_id,
            status=JobStatus.cancelled,
            finish_reason="cancelled",
            attempt=rec.attempt,
            messages=rec.request.messages,
        )
        for status, reason in (
            (JobStatus.queued, "cancelled while queued"),
            (JobStatus.requires_action, "cancelled while waiting for its caller"),
        ):
            try:
                await self.emit(
                    job_id,
                    EventType.cancelled,
                    CancelledData(reason=reason).to_wire(),
                    result=result,
                    only_if_status=status,
                )
            except JobEnded:
                continue
            if status is JobStatus.requires_action:
                await self.redis.zrem(keys.PAUSED, job_id)
            return JobStatus.cancelled
        return await self.status(job_id)

    async def cancel_requested(self, job_id: str) -> bool:
        return bool(await self.redis.exists(keys.cancel(job_id)))

    async def cancels_requested(self, job_ids: list[str]) -> set[str]:
        """Which of the jobs have a cancel key set, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for j in job_ids:
                pipe.exists(keys.cancel(j))
            found = await pipe.execute()
        return {j for j, n in zip(job_ids, found, strict=True) if n}
