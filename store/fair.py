"""Fair share between tenants within a model's queue: which waiting job starts next.

**The rule: stride scheduling on a virtual time.** Each tenant with jobs waiting has a *pass*.
The next job to start belongs to the tenant with the smallest pass (that is under its running
cap); starting it advances that tenant's pass by ``1 / weight`` and sets the model's *virtual
time* to the pass it started at. Under saturation every active tenant therefore gets starts in
proportion to its weight, whatever its backlog: 500 waiting jobs earn no more turns than one.

A tenant that becomes active (its first job arrives while it has none waiting) enters at
``max(virtual time, the pass it left with)``:

- not credited for idle time: it does not start behind the virtual time, so a tenant that was
  away for an hour cannot then take an hour's worth of starts in a burst (a deficit counter or
  a plain "least served so far" rule would give it that);
- not penalised: it starts level with the tenant served last, so its first job goes ahead of
  the rest of any flood (the flooding tenant's pass is already past the virtual time);
- a tenant that empties its set for a moment and refills it keeps the pass it earned, so
  submitting one job at a time gains nothing over submitting them together.

This is start-time fair queuing with every job costing one start: toolq's jobs vary in length,
but a job's length is not known when it starts, and the running cap bounds how much of the fleet
one tenant's long jobs can hold.

**Priorities** (``JobRequest.priority``, 0-9) order a tenant's own waiting jobs: its next start
is its highest-priority, oldest job. Priority never changes whose turn it is, so the shares
hold whatever priorities tenants give, and a priority-9 job does not jump ahead of other
tenants' turns. It also does not preempt: a job already on arq's queue or running in the engine
(batched with others, one slot each) keeps its slot; the high-priority job takes its tenant's
next turn.

**How the choice feeds arq.** Submitting (store/lua/submit.lua) stores the arq job
(``arq:job:<id>``, arq's own payload) but puts the job id in its tenant's waiting set instead of
arq's queue, and wakes a worker. A worker, before each look at arq's queue, asks
store/lua/dispatch.lua for as many jobs as it has free slots; the script chooses them by
the rule above and adds them to arq's queue, all in one step, so any number of workers and
gateways agree. arq then hands them out as before (leases, claims, resumes are unchanged): the
queue holds only the few jobs chosen for free slots, and the backlog waits, fairly, here.
A resumed attempt (answer.lua) and a thread's run when its turn on the thread comes
(thread_turns.lua) wait for a fair turn the same way; an attempt claimed from a lost worker
(claim.lua) goes straight back onto arq's queue, since it already had its turn and still counts
in its tenant's running set.

**Affinity** (store/affinity.py) works inside a tenant's turn, never across turns: the
asking worker names itself, and a waiting job offered first to another live worker with a free
slot is left to that worker until its wait ends, while the tenant's turn goes to its next job
(dispatch.lua says how). Every start, whoever makes it, advances its tenant's pass by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store import affinity, arq_link, keys
from store.scripts import Script


@dataclass(frozen=True)
class Dispatched:
    job_id: str
    tenant: str
    attempt: int
    queued: bool  # False: its stored arq job had expired; the caller enqueues it with arq
    placed: str = ""  # a job with a preferred worker: affinity, fallback_wait, fallback_gone, fallback_full
    taken: bool = False  # marked in progress for the asking worker, which runs it (``Round.score``)


@dataclass(frozen=True)
class Round:
    """One call of dispatch.lua: the jobs chosen, and when a job left to another worker stops
    waiting for it (unix ms on Redis's clock; 0 none), so the asking worker looks again by then."""

    chosen: list[Dispatched]
    held_until_ms: int = 0
    lines_taken: int = 0  # of the jobs chosen, batch lines (their wake tokens are on the lines' list)
    spare_left: bool = False  # a batch line waits for a free engine slot
    score: int = 0  # the queue score of the jobs chosen (Redis's clock): arq's run_job takes it


class FairQueue:
    def __init__(self, redis: Any):
        self.redis = redis
        self._dispatch = Script(redis, "dispatch")

    async def dispatch(self, model: str, want: int) -> list[Dispatched]:
        """Choose up to ``want`` jobs of the model fairly and put them on its arq queue."""
        return (await self.dispatch_for(model, want, worker="")).chosen

    async def dispatch_for(
        self, model: str, want: int, *, worker: str, slots_free: int | None = None, take_ms: int | None = None
    ) -> Round:
        """``dispatch`` for one asking worker (its id; '' none): jobs offered first to it come
        to it, jobs offered to another live worker wait for that worker (store/affinity.py).
        ``slots_free``: the worker's free engine slots, the most batch lines (``spare`` jobs) it
        takes; the rest of ``want`` is its interactive reserve (None: all of ``want``).
        ``take_ms``: the jobs chosen are also marked in progress for the worker, with arq's mark of
        that lifetime (``Dispatched.taken``), so it runs them without taking them off the queue
        (None: they wait on the queue for a pickup)."""
        if want <= 0:
            return Round([])
        flat = await self._dispatch(
            tenants=keys.fair_tenants(model),
            passes=keys.fair_passes(model),
            vtime=keys.fair_vtime(model),
            queue=keys.queue(model),
            weights=keys.TENANT_WEIGHTS,
            caps=keys.TENANT_CAPS,
            started=keys.TENANT_STARTED,
            model=model,
            want=want,
            load=keys.worker_load(model),
            counts=keys.affinity_counts(model),
            reserved=keys.affinity_reserved(model),
            reserve_ms=affinity.RESERVE_MS,
            asking=worker,
            worker_wake_prefix=keys.worker_wake(model, ""),
            slots_free=want if slots_free is None else slots_free,
            progress_prefix=arq_link.IN_PROGRESS_KEY_PREFIX,
            mark_ms=take_ms,
            **arq_link.stored_job_args(),
        )
        held_until, lines_taken, spare_left, score = int(flat[0]), int(flat[1]), int(flat[2]) == 1, int(flat[3])
        flat = flat[4:]
        chosen = [
            Dispatched(
                flat[i].decode(),
                flat[i + 1].decode(),
                int(flat[i + 2]),
                int(flat[i + 3]) == 1,
                flat[i + 4].decode(),
                int(flat[i + 5]) == 1,
            )
            for i in range(0, len(flat), 6)
        ]
        for d in chosen:
            if not d.queued:  # waited past the stored arq job's lifetime: enqueue it afresh
                await arq_link.enqueue_attempt(self.redis, d.job_id, model, d.attempt)
        return Round(chosen, held_until, lines_taken, spare_left, score)

    async def waiting(self, model: str) -> dict[str, int]:
        """Jobs waiting for a fair turn, per tenant."""
        tenants = [t.decode() for t in await self.redis.zrange(keys.fair_tenants(model), 0, -1)]
        if not tenants:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for t in tenants:
                pipe.zcard(keys.fair_waiting(model, t))
            counts = await pipe.execute()
        return {t: int(n) for t, n in zip(tenants, counts, strict=True) if n}

    async def nudge(self, model: str, worker: str) -> None:
        """Wake ``worker`` from its wait for work: a slot of its freed while batch lines were
        coming (``Round.lines_taken``, ``Round.spare_left``), and a worker with its reserve free
        waits for a wake."""
        own = keys.worker_wake(model, worker)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lpush(own, "slot")
            pipe.pexpire(own, 60_000)
            length, _ = await pipe.execute()
        if length > keys.WAKE_BACKLOG:  # trimmed only past the backlog, as lib/wake_push.lua does
            await self.redis.ltrim(own, 0, keys.WAKE_BACKLOG - 1)

    async def started(self) -> dict[str, int]:
        """Jobs dispatched so far, per tenant (every model)."""
        return {k.decode(): int(v) for k, v in (await self.redis.hgetall(keys.TENANT_STARTED)).items()}

    async def running(self, tenants: list[str]) -> dict[str, int]:
        """Jobs handed to the queue and not yet ended or paused, per tenant."""
        if not tenants:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for t in tenants:
                pipe.zcard(keys.tenant_running(t))
            counts = await pipe.execute()
        return {t: int(n) for t, n in zip(tenants, counts, strict=True)}
