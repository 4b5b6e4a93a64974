"""Threads: conversations kept in Redis, and runs on them (one job per run).

A thread is a hash (tenant, metadata, TTL, the active run), a list of messages (one Message JSON
each) with a list of their ids beside it, the runs waiting for their turn and the list of its
runs (store/keys.py: thread_*). Every write that decides something is one Lua script:

- ``thread_run.lua`` makes a run's job and applies the caller's double-texting policy
  (``reject``, ``enqueue``, ``interrupt``, ``rollback``) against the active run in the same step,
  so runs posted at once are ordered by Redis alone;
- a run's job is built when its turn comes (``thread_turns.lua``): the thread's messages as they
  are then, followed by the run's input, so a run that waited sees what the runs before it added;
- a run's end is its terminal event: ``emit.lua`` includes ``thread_end.lua``, which appends the
  run's messages from its input on (calls, tool results, the answer) to the thread and starts the
  next waiting run, in the same step as the event. A run that failed or was cancelled appends
  nothing, unless it keeps partial history (asked by its caller, or set by a run that interrupted
  it); a rolled-back run appends nothing at all.

A thread lives ``ttl_s`` after its last write (its own, else the store's default
``ThreadLimits.ttl_s``, TOOLQ_THREAD_TTL_S: 30 days), and never expires while a run is active.
A tenant holds at most ``max_threads`` live threads and a thread at most ``max_messages``
messages (ThreadLimits, each overridable per tenant in TOOLQ_TENANTS): creating past the first,
or adding or running past the second, is refused (ThreadLimitReached) and writes nothing, and so
is a run whose job would hold more than ``run_messages``, counting the thread's history. A run's
own output is appended when it ends and is never refused then, so a thread can pass its cap by one
run's messages.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from store import arq_link, budget_holds, byte_quota, keys
from store.admission import refusal
from store.jobstore import JobStore, _event_parts
from store.scripts import Script
from toolq.tenants import TenantPolicy
from toolq.wire.protocol import EventType, JobRequest, Message, new_job_id, now_ms
from toolq.wire.thread_api import Strategy, page

if TYPE_CHECKING:  # a type only: the store does not load the tracing package
    from toolq.tracing.carrier import TraceCarrier

PAGE_TRIES = 3  # reads of a page that concurrent changes shifted, before reading the whole thread


def new_thread_id() -> str:
    return "thread_" + secrets.token_hex(10)


def new_item_id() -> str:
    return "msg_" + secrets.token_hex(10)


class ThreadNotFound(KeyError):
    """No such thread, or another tenant's (which must look the same)."""


@dataclass(frozen=True)
class ThreadLimits:
    """The bounds on what threads keep in Redis; a tenant's policy (toolq/tenants.py) may set its
    own ``max_threads`` / ``max_thread_messages``. None: no bound."""

    ttl_s: int | None = None  # default TTL of a thread created without one
    max_threads: int | None = None  # live threads per tenant
    max_messages: int | None = None  # messages per thread
    # messages of a run's job (the gateway's TOOLQ_MAX_MESSAGES): its instructions, the thread's
    # history and its input, as a submitted job's messages are its whole conversation
    run_messages: int | None = None


class ThreadLimitReached(Exception):
    """A write that would take a tenant past its thread cap, or a thread past its message cap."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class RunRejected(Exception):
    """``reject``: a run is active on the thread."""

    def __init__(self, thread_id: str, active: str):
        super().__init__(
            f"thread {thread_id} has an active run ({active}); multitask_strategy 'reject' refused this one"
        )
        self.thread_id, self.active = thread_id, active


@dataclass(frozen=True)
class ThreadInfo:
    id: str
    created_ms: int
    metadata: dict[str, str]
    ttl_s: int | None
    active_run: str | None
    waiting: int
    message_count: int


@dataclass(frozen=True)
class RunPlaced:
    """Where a new run stands: started now, or waiting behind ``active`` (which it may be stopping)."""

    job_id: str
    state: Literal["started", "waiting", "interrupting"]
    active: str | None


def request_parts(request: JobRequest, lead: int = 0) -> tuple[str, str, str]:
    """The request's JSON around its messages' elements, so the scripts can put the thread's
    messages ahead of the input without parsing JSON (whose numbers Lua would round). The first
    ``lead`` messages (a Responses request's instructions) go ahead of the thread's messages and
    are never appended to it."""
    rest = request.model_dump_json(exclude={"messages"})
    dumped = [m.model_dump_json(exclude_none=True) for m in request.messages]
    head = '{"messages":[' + "".join(d + "," for d in dumped[:lead])
    return head, ",".join(dumped[lead:]), "]," + rest[1:]


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class ThreadStore:
    """Threads of every tenant; every method takes the caller's tenant and treats another
    tenant's thread as missing."""

    def __init__(self, jobs: JobStore, *, cancel_ttl_s: int = 24 * 3600, limits: ThreadLimits | None = None):
        self.jobs = jobs
        self.limits = limits or ThreadLimits()
        self.redis = jobs.redis
        self.cancel_ttl_s = cancel_ttl_s
        self._run = Script(self.redis, "thread_run")
        self._add = Script(self.redis, "thread_add")
        self._forget = Script(self.redis, "thread_forget")
        self._delete = Script(self.redis, "thread_delete")
        self._meta = Script(self.redis, "thread_meta")
        self._create = Script(self.redis, "thread_create")

    def max_threads(self, tenant: str) -> int | None:
        return self.jobs.bounds.policy(tenant).max_threads or self.limits.max_threads

    def max_messages(self, tenant: str) -> int | None:
        return self.jobs.bounds.policy(tenant).max_thread_messages or self.limits.max_messages

    def _run_cap(self, tenant: str, lead: int) -> tuple[int | None, bool]:
        """The most messages the thread may hold with a run's input added, and whether that is
        the run's job cap (``run_messages``, less its ``lead``) rather than the thread's."""
        thread = self.max_messages(tenant)
        run = None if self.limits.run_messages is None else self.limits.run_messages - lead
        if run is not None and (thread is None or run < thread):
            return run, True
        return thread, False

    def _run_too_long(self, thread_id: str, count: int, adding: int, lead: int) -> ThreadLimitReached:
        return ThreadLimitReached(
            f"a run on thread {thread_id} would hold {count + adding + lead} messages (the thread's {count}, "
            f"the input's {adding}" + (f", {lead} of instructions" if lead else "") + "), above the limit of "
            f"{self.limits.run_messages} messages per job (TOOLQ_MAX_MESSAGES); start a new thread",
            field="messages",
        )

    def _too_many_messages(self, tenant: str, thread_id: str, count: int, adding: int) -> ThreadLimitReached:
        cap = self.max_messages(tenant)
        return ThreadLimitReached(
            f"thread {thread_id} holds {count} messages and {adding} more would pass its limit of {cap} "
            "(TOOLQ_MAX_THREAD_MESSAGES, or max_thread_messages in TOOLQ_TENANTS); start a new thread",
            field="messages",
        )

    # ------------------------------------------------------------------ threads

    async def create(
        self,
        tenant: str,
        *,
        metadata: dict[str, str] | None = None,
        ttl_s: int | None = None,
        messages: Sequence[Message] = (),
    ) -> ThreadInfo:
        """A thread of the tenant; raises ThreadLimitReached at the tenant's cap on threads or past
        the cap on a thread's messages. ``ttl_s`` None: the store's default TTL."""
        ttl_s = ttl_s if ttl_s is not None else self.limits.ttl_s
        cap = self.max_messages(tenant)
        if cap is not None and len(messages) > cap:
            raise ThreadLimitReached(
                f"messages has {len(messages)} entries, above a thread's limit of {cap} messages "
                "(TOOLQ_MAX_THREAD_MESSAGES, or max_thread_messages in TOOLQ_TENANTS)",
                field="messages",
            )
        tid = new_thread_id()
        created = now_ms()
        max_threads = self.max_threads(tenant)
        code, count, *rest = await self._create(
            thread=keys.thread(tid),
            messages=keys.thread_messages(tid),
            ids=keys.thread_ids(tid),
            index=keys.threads(tenant),
            thread_id=tid,
            tenant=tenant,
            created_ms=created,
            metadata=json.dumps(metadata or {}, ensure_ascii=False),
            ttl_s=ttl_s,
            items=json.dumps([[new_item_id(), m.model_dump_json(exclude_none=True)] for m in messages]),
            max_threads=max_threads,
            **byte_quota.script_args(self.jobs.bounds.byte_quota(tenant)),
        )
        if int(code) == byte_quota.REFUSED:
            raise byte_quota.refusal(tenant, [code, count, *rest])
        if int(code) == -1:
            raise ThreadLimitReached(
                f"tenant {tenant!r} has {int(count)} threads, its limit is {max_threads} (TOOLQ_MAX_THREADS, or "
                "max_threads in TOOLQ_TENANTS); delete threads it no longer needs",
                field="threads",
            )
        return ThreadInfo(tid, created, dict(metadata or {}), ttl_s, None, 0, len(messages))

    async def get(self, tenant: str, thread_id: str) -> ThreadInfo:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(keys.thread(thread_id))
            pipe.zcard(keys.thread_waiting(thread_id))
            pipe.llen(keys.thread_messages(thread_id))
            h, waiting, count = await pipe.execute()
        rec = {_text(k): _text(v) for k, v in h.items()}
        if rec.get("tenant") != tenant:
            raise ThreadNotFound(thread_id)
        return ThreadInfo(
            id=thread_id,
            created_ms=int(rec.get("created_ms", 0)),
            metadata=json.loads(rec.get("metadata") or "{}"),
            ttl_s=int(rec["ttl_s"]) if rec.get("ttl_s") else None,
            active_run=rec.get("active") or None,
            waiting=int(waiting),
            message_count=int(count),
        )

    async def update_metadata(self, tenant: str, thread_id: str, metadata: dict[str, str]) -> ThreadInfo:
        """Replace the thread's metadata (OpenAI's conversation update does the same)."""
        done = await self._meta(
            thread=keys.thread(thread_id), tenant=tenant, metadata=json.dumps(metadata, ensure_ascii=False)
        )
        if int(done) == -3:
            raise ThreadNotFound(thread_id)
        return await self.get(tenant, thread_id)

    async def tenant_threads(self, tenant: str, *, limit: int = 20, before_ms: int | None = None) -> list[ThreadInfo]:
        """The tenant's threads, newest first; ``before_ms`` pages on (a thread's created_ms)."""
        index = keys.threads(tenant)
        out: list[ThreadInfo] = []
        top: str = f"({before_ms}" if before_ms is not None else "+inf"
        while len(out) < limit:
            ids = await self.redis.zrevrangebyscore(index, top, "-inf", start=0, num=limit - len(out), withscores=True)
            if not ids:
                break
            for raw, _score in ids:
                tid = _text(raw)
                try:
                    out.append(await self.get(tenant, tid))
                except ThreadNotFound:
                    await self.redis.zrem(index, tid)  # expired: its index entry is stale
            top = f"({int(ids[-1][1])}"
        return out

    async def delete(self, tenant: str, thread_id: str) -> None:
        """Delete the thread; its active and waiting runs are cancelled."""
        out = await self._delete(
            thread=keys.thread(thread_id),
            messages=keys.thread_messages(thread_id),
            ids=keys.thread_ids(thread_id),
            waiting=keys.thread_waiting(thread_id),
            runs=keys.thread_runs(thread_id),
            index=keys.threads(tenant),
            tenant=tenant,
            thread_id=thread_id,
        )
        if int(out[0]) == -3:
            raise ThreadNotFound(thread_id)
        for run in out[1:]:
            await self.jobs.cancel(_text(run))

    # ------------------------------------------------------------------ messages

    async def messages(self, tenant: str, thread_id: str) -> list[tuple[str, Message]]:
        """Every message of the thread with its id, oldest first."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(keys.thread(thread_id), "tenant")
            pipe.lrange(keys.thread_ids(thread_id), 0, -1)
            pipe.lrange(keys.thread_messages(thread_id), 0, -1)
            owner, ids, raw = await pipe.execute()
        if owner is None or _text(owner) != tenant:
            raise ThreadNotFound(thread_id)
        return [(_text(i), Message.model_validate_json(m)) for i, m in zip(ids, raw, strict=False)]

    async def message_page(
        self, tenant: str, thread_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[tuple[str, Message]], bool]:
        """One page of the thread's messages, as ``toolq.wire.thread_api.page`` chooses it, and whether
        more follow. Reads the ids (small) and then only the page's messages, with the ids of the
        same range in the same step: a page that a concurrent change shifted is read again."""
        for _ in range(PAGE_TRIES):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hget(keys.thread(thread_id), "tenant")
                pipe.lrange(keys.thread_ids(thread_id), 0, -1)
                owner, ids = await pipe.execute()
            if owner is None or _text(owner) != tenant:
                raise ThreadNotFound(thread_id)
            chosen, more = page([(_text(i), n) for n, i in enumerate(ids)], after=after, limit=limit, order=order)
            if not chosen:
                return [], more
            lo, hi = min(n for _, n in chosen), max(n for _, n in chosen)
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lrange(keys.thread_ids(thread_id), lo, hi)
                pipe.lrange(keys.thread_messages(thread_id), lo, hi)
                now_ids, raw = await pipe.execute()
            by_id = {_text(i): m for i, m in zip(now_ids, raw, strict=False)}
            if [_text(i) for i in now_ids] == [i for i, _ in sorted(chosen, key=lambda c: c[1])]:
                return [(i, Message.model_validate_json(by_id[i])) for i, _ in chosen], more
        return page(await self.messages(tenant, thread_id), after=after, limit=limit, order=order)

    async def add_messages(self, tenant: str, thread_id: str, messages: Sequence[Message]) -> list[str]:
        """Append messages; returns their ids. Raises ThreadLimitReached past the thread's cap."""
        ids = [new_item_id() for _ in messages]
        pairs = [[i, m.model_dump_json(exclude_none=True)] for i, m in zip(ids, messages, strict=True)]
        code, count, *rest = await self._add(
            thread=keys.thread(thread_id),
            messages=keys.thread_messages(thread_id),
            ids=keys.thread_ids(thread_id),
            tenant=tenant,
            items=json.dumps(pairs, ensure_ascii=False),
            max_messages=self.max_messages(tenant),
            **byte_quota.script_args(self.jobs.bounds.byte_quota(tenant)),
        )
        if int(code) == byte_quota.REFUSED:
            raise byte_quota.refusal(tenant, [code, count, *rest])
        if int(code) == -3:
            raise ThreadNotFound(thread_id)
        if int(code) == -4:
            raise self._too_many_messages(tenant, thread_id, int(count), len(messages))
        return ids

    async def forget_message(self, tenant: str, thread_id: str, item_id: str) -> bool:
        """Remove one message; False when the thread has no message of that id."""
        n = int(
            await self._forget(
                thread=keys.thread(thread_id),
                messages=keys.thread_messages(thread_id),
                ids=keys.thread_ids(thread_id),
                tenant=tenant,
                item_id=item_id,
            )
        )
        if n == -3:
            raise ThreadNotFound(thread_id)
        return n == 1

    # ------------------------------------------------------------------ runs

    async def run(
        self,
        tenant: str,
        thread_id: str,
        request: JobRequest,
        *,
        model: str,
        strategy: Strategy = "enqueue",
        keep_partial: bool = False,
        lead: int = 0,
        policy: TenantPolicy | None = None,
        trace: TraceCarrier | None = None,
    ) -> RunPlaced:
        """A run of ``request`` (its messages are the new input) on the thread, placed by
        ``strategy`` against the active run; its first ``lead`` messages stay ahead of the thread's
        and out of it (instructions). Raises ThreadNotFound, RunRejected, QueueAtLimit when
        the store's queue bounds refuse it, as for a submit (store/admission.py): a run that
        waits behind the thread's active run counts as one of its tenant's queued jobs, and
        BudgetExhausted when its token budgets have no room (it reserves its ceiling, as a submit
        does: store/budget_holds.py).

        Under fair share (the JobStore's ``fair``) a run, whether it starts at once or when the run
        before it ends, waits in its tenant's set for its fair turn as a submitted job does;
        ``policy`` records the tenant's weight and cap and the run's token cap, as for a submit;
        ``trace`` the trace the run's spans continue, as for a submit."""
        job_id = new_job_id()
        created = now_ms()
        head, tail = _event_parts(
            job_id, EventType.queued, {"model": model, "attempt": 1, "thread_id": thread_id}, created
        )
        req_head, req_input, req_tail = request_parts(request, lead)
        arq = arq_link.arq_job(job_id, model, 1, created)
        policy = policy or (self.jobs.bounds.policy(tenant) if self.jobs.bounds.tenants else None)
        admission = self.jobs.bounds.script_args(tenant)
        cap, of_run = self._run_cap(tenant, lead)
        code, active, *rest = await self._run(
            thread=keys.thread(thread_id),
            waiting=keys.thread_waiting(thread_id),
            runs=keys.thread_runs(thread_id),
            job=keys.job(job_id),
            log=keys.log(job_id),
            job_channel=keys.events_channel(job_id),
            all_channel=keys.EVENTS_ALL,
            tenant_jobs=keys.tenant_jobs(tenant),
            all_jobs=keys.JOBS_ALL,
            index_keep=self.jobs.index_keep,
            thread_id=thread_id,
            tenant=tenant,
            job_id=job_id,
            strategy=strategy,
            keep="partial" if keep_partial else "",
            model=model,
            created_ms=created,
            head=head,
            tail=tail,
            maxlen=self.jobs.stream_maxlen,
            req_head=req_head,
            req_input=req_input,
            req_tail=req_tail,
            lead=lead,
            cancel_ttl_s=self.cancel_ttl_s,
            wake=keys.wake(model),
            payload=arq["payload"].hex(),
            **{k: v for k, v in arq.items() if k not in ("score", "payload")},
            priority=request.priority,
            weights=keys.TENANT_WEIGHTS,
            caps=keys.TENANT_CAPS,
            weight=policy.weight if policy else None,
            max_running=(policy.max_running or 0) if policy else None,
            job_tokens=policy.job_tokens if policy else None,
            prefer_wait_ms=self.jobs.affinity_wait_ms,
            worker_wake_prefix=keys.worker_wake(model, ""),
            traceparent=trace.traceparent if trace else "",
            tracestate=trace.tracestate if trace else "",
            fair=self.jobs.fair,
            **admission,
            webhook=request.webhook.model_dump_json() if request.webhook else None,
            max_messages=cap,
            input_count=len(request.messages) - lead,
            **budget_holds.script_args(request, policy),
            **byte_quota.script_args(self.jobs.bounds.byte_quota(tenant)),
        )
        if int(code) == budget_holds.REFUSED:  # its token budgets have no room (budget.lua); nothing was written
            raise budget_holds.refusal(tenant, [code, active, *rest])
        if int(code) == byte_quota.REFUSED:  # the tenant keeps its quota of bytes; nothing was written
            raise byte_quota.refusal(tenant, [code, active, *rest])
        if int(code) == -5 and of_run:
            raise self._run_too_long(thread_id, int(active), len(request.messages) - lead, lead)
        if int(code) == -5:
            raise self._too_many_messages(tenant, thread_id, int(active), len(request.messages) - lead)
        if int(code) <= -10:  # the queue bounds refused it (admit.lua); nothing was written
            raise refusal(
                int(code) + 10,
                int(active),
                *map(int, rest),
                model=model,
                tenant=tenant,
                depth=admission["max_depth"],
            )
        code, active = int(code), _text(active) or None
        if code == -3:
            raise ThreadNotFound(thread_id)
        if code == -1:
            assert active is not None
            raise RunRejected(thread_id, active)
        if code == 3:
            assert active is not None
            # the script set its cancel key, which stops it if it runs; a queued or paused run
            # is ended here at once, so the line moves on without waiting for a worker
            await self.jobs.cancel(active)
        state: Literal["started", "waiting", "interrupting"] = (
            "started" if code == 1 else "waiting" if code == 2 else "interrupting"
        )
        return RunPlaced(job_id, state, active)

    async def runs(self, tenant: str, thread_id: str) -> list[str]:
        await self.get(tenant, thread_id)
        return [_text(r) for r in await self.redis.lrange(keys.thread_runs(thread_id), 0, -1)]
