"""The worker's pickup: arq's ``Worker``, woken by enqueuers, taking a batch in one script, and the
only module of the house that imports arq (an import-linter contract in pyproject.toml).

arq 0.28 pins ``redis<6`` in its own metadata, so the worker's extra installs redis-py 5 with it;
the store below (store/arq_link.py holds arq's stored formats, without importing arq) runs on
any redis-py 5 to 8, and so do the gateway, the webhook sender and the SDK. What this module
relies on in arq's internals is listed in store/arq_link.py and pinned by
tests/integration/test_arq_contract.py.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from arq.connections import ArqRedis
from arq.utils import timestamp_ms
from arq.worker import Retry as ArqRetry
from arq.worker import Worker, func

from store import arq_link, keys
from store.errors import RedisError

log = structlog.get_logger("toolq.worker")


def arq_client(url: str, **kwargs: Any) -> ArqRedis:
    """arq's own client class, with toolq's serializer, on the store's retrying pool: what arq's
    ``Worker`` reads the queue through (and what a service that enqueues with arq would use)."""
    client = ArqRedis(
        arq_link.retrying_pool(url), job_serializer=arq_link.pack, job_deserializer=arq_link.unpack, **kwargs
    )
    client.auto_close_connection_pool = True  # the pool is this client's alone
    return client


JobHandler = Callable[[str, int], Coroutine[Any, Any, str]]


@dataclass(frozen=True)
class Fed:
    """What a feed put on the queue: ``again``, the seconds until it should be asked again (a job
    left to another worker stops waiting for it then), None none; ``lines``, how many of the
    jobs are batch lines, whose wake tokens are on the lines' own list; ``taken``, (arq id, queue
    score) of the jobs it chose and marked in progress for this worker, which the pickup runs at
    once; ``offered``, how many of those were offered to this worker first, each with a wake token
    on its own list (store/affinity.py); ``whole``, whether it took every job it chose, so it left
    none on arq's queue for a pickup to read."""

    again: float | None = None
    lines: int = 0
    taken: tuple[tuple[str, int], ...] = ()
    offered: int = 0
    whole: bool = False


# Given the free slots and the in-progress mark's lifetime (ms), puts fairly chosen jobs on the
# queue and takes those it chose for this worker.
Feeder = Callable[[int, int], Awaitable[Fed]]


class WakeableWorker(Worker):
    """arq's Worker, woken by enqueuers instead of sleeping a poll, and riding out Redis outages.

    ``wake_key`` None polls as plain arq does (the benchmarks compare the two); ``own_wake_key``
    is this worker's own list, pushed when a job is offered to it first; ``spare_wake_key`` is
    the batch lines' list, read only while fewer than ``slots`` jobs run here. ``feed``, given the free
    slots, puts the jobs due next on the queue before each look at it (fair share), and the jobs it
    takes for this worker run through ``handler`` (``run_fed``); ``worker_id``
    and ``reserved_key`` let the pickup honour affinity's reservations (store/affinity.py).
    """

    def __init__(
        self,
        *args: Any,
        wake_key: str | None = None,
        own_wake_key: str | None = None,
        spare_wake_key: str | None = None,
        slots: int | None = None,
        feed: Feeder | None = None,
        handler: JobHandler | None = None,
        worker_id: str,
        reserved_key: str,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.wake_key = wake_key
        self.own_wake_key = own_wake_key
        self.spare_wake_key = spare_wake_key  # batch lines' tokens: read while an engine slot is free
        self.slots = slots if slots is not None else self.max_jobs
        self.feed = feed
        self.handler = handler  # run(job id, attempt): what the registered function calls
        self.worker_id = worker_id
        self.reserved_key = reserved_key
        self._taker: arq_link.JobTaker | None = None  # registered on first use
        self._taken = 0  # jobs start_jobs took in this look at the queue
        self._woken: str | None = None  # the list whose wake token woke this look (BLPOP)
        self._lines = 0  # of the jobs put on the queue for this look, batch lines
        self._offered = 0  # of the jobs taken in this look, those offered to this worker first
        self._freed: set[str] = set()  # arq ids of jobs counted free while they write their ending
        self._place_freed = asyncio.Event()  # a full worker's wait ends when a place frees
        # arq id -> until when (loop time) a queue read passes it over: it was in progress on another
        # worker when arq_start.lua last looked (start_jobs)
        self._elsewhere: dict[bytes, float] = {}
        self._read_at = float("-inf")  # loop time of the last read of arq's queue

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's start_jobs in one round trip: take the jobs no worker has in progress (the same
        check and in-progress mark, store/lua/arq_start.lua), then run each with arq's run_job."""
        free = self.max_jobs - self.job_counter
        # a job stays on arq's queue while in progress, so under load most of what a read finds runs
        # somewhere: here (its task), or on another worker, seen so by the last look; either costs no
        # script call. Another worker's job can be taken again only once arq queued it again, for
        # RUN_AGAIN_S at the soonest, or once its mark lapsed (hours), so a look that passes it over
        # for that long never leaves a takeable job behind.
        now = self.loop.time()
        job_ids = [
            j
            for j in job_ids
            if ((t := self.tasks.get(j.decode())) is None or t.done()) and self._elsewhere.get(j, 0.0) <= now
        ]
        if free <= 0 or not job_ids:
            return
        if self._taker is None:
            self._taker = arq_link.JobTaker(self.pool)
        taken = await self._taker.take(
            self.queue_name,
            job_ids,
            limit=free,
            asking=self.worker_id,
            reserved=self.reserved_key,
            mark_ms=int(self.in_progress_timeout_s * 1000),
            now_ms=timestamp_ms(),
        )
        if len(taken) < free:  # not cut short by the limit: every id left was refused
            took = {arq_id.encode() for arq_id, _ in taken}
            until = now + arq_link.RUN_AGAIN_S
            self._elsewhere = {j: u for j, u in self._elsewhere.items() if u > now}
            self._elsewhere.update((j, until) for j in job_ids if j not in took)
        await self._run_taken(taken)

    async def _tend(self) -> None:
        """arq's poll less its read of the queue: what it does after the read, as it does it."""
        if self.allow_abort_jobs:
            await self._cancel_aborted_jobs()
        for job_id, t in list(self.tasks.items()):
            if t.done():
                del self.tasks[job_id]
                t.result()  # as arq: an error of run_job itself surfaces here
        await self.heart_beat()

    async def _run_taken(self, taken: Sequence[tuple[str, int]], *, fed: bool = False) -> None:
        """Run the jobs marked in progress for this worker: those a feed took with ``run_fed``,
        those read off arq's queue with arq's run_job."""
        self._taken += len(taken)
        run = self.run_fed if fed and self.handler is not None else self.run_job
        for job_id, score in taken:
            await self.sem.acquire()  # free: job_counter was below max_jobs for each of them
            self.job_counter += 1
            task = self.loop.create_task(run(job_id, score))
            task.add_done_callback(functools.partial(self._done, job_id))
            self.tasks[job_id] = task

    async def run_fed(self, arq_id: str, score: int) -> None:
        """One job a feed took for this worker (dispatch.lua marked it in progress), run as arq's
        run_job runs it, less run_job's opening round trip: that reads the stored job for its
        function and arguments, which the id names here (a toolq attempt, arq_link.arq_job_id), and
        counts arq's tries, which toolq keeps as attempts. Under a batch that trip was the pickup's
        slowest step (bench/bench_batch_api.py). The ending is arq's own ``finish_job``, given what
        run_job gives it: finished (its keys dropped, off the queue) unless it must run again
        (``RunAgain``: back on the queue after its delay) or the worker is shutting down (its mark
        dropped, so another worker runs it)."""
        assert self.handler is not None
        job_id, attempt = arq_link.attempt_of(arq_id)
        finish, incr_score = True, None
        task = self.job_tasks[arq_id] = self.loop.create_task(self.handler(job_id, attempt))
        try:
            await asyncio.wait_for(task, self.job_timeout_s)
        except arq_link.RunAgain as e:
            finish, incr_score = False, int(e.defer_s * 1000) + (timestamp_ms() - score)
            self.jobs_retried += 1
        except asyncio.CancelledError:
            finish = False
            self.jobs_retried += 1
        except Exception:
            log.exception("job run failed", arq_id=arq_id)  # as arq: an error run() did not catch
            self.jobs_failed += 1
        else:
            self.jobs_complete += 1
        finally:
            del self.job_tasks[arq_id]
        await asyncio.shield(self.finish_job(arq_id, finish, None, None, False, incr_score, None))

    def free_early(self, job_id: str) -> None:
        """The job is writing its ending: its place counts free from now on, as in its load
        (worker/load.py), so the next look may take a job into it before arq has finished it."""
        prefix = job_id + ":"  # one attempt of a job runs here at a time (store/arq_link.py arq_job_id)
        for arq_id, task in self.tasks.items():
            if arq_id.startswith(prefix) and arq_id not in self._freed and not task.done():
                self._freed.add(arq_id)
                self._release_sem_dec_counter_on_complete()
                self._place_freed.set()

    def _done(self, arq_id: str, _task: asyncio.Task[Any]) -> None:
        if arq_id in self._freed:
            self._freed.discard(arq_id)  # counted free already
        else:
            self._release_sem_dec_counter_on_complete()

    async def _poll_iteration(self) -> None:
        # arq's poll() sleeps whatever is left of poll_delay after each iteration, so a wake
        # must be served inside the iteration: keep picking and waiting until the step is used up.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.poll_delay_s
        while True:
            self._taken = self._lines = self._offered = 0
            again: float | None = None
            read = True
            try:
                if self.feed is not None and self.allow_pick_jobs and self.job_counter < self.max_jobs:
                    fed = await self.feed(self.max_jobs - self.job_counter, int(self.in_progress_timeout_s * 1000))
                    again, self._lines, self._offered = fed.again, fed.lines, fed.offered
                    # the jobs chosen for this worker were taken in the same step (dispatch.lua) and
                    # start now, with no read of arq's queue nor arq_start.lua (bench/bench_batch_api.py,
                    # bench/bench_capacity.py)
                    await self._run_taken(fed.taken, fed=True)
                    # A feed that took all it chose left nothing on arq's queue; what else may be
                    # there (a retry come due, a job enqueued without fair share) waits at most one
                    # poll_delay for a read, as on plain arq: a worker fed line after line beside a
                    # batch reads twice a second, not on every look.
                    read = not (fed.whole and fed.taken) or loop.time() - self._read_at >= self.poll_delay_s
                if read:
                    self._read_at = loop.time()
                    await super()._poll_iteration()
                else:
                    await self._tend()
                spent = self._spent_tokens()
            except (RedisError, OSError) as e:
                log.warning("queue poll failed; retrying", error=str(e))
                await asyncio.sleep(min(1.0, self.poll_delay_s))
                return
            left = deadline - loop.time()
            if left <= 0 or not self.allow_pick_jobs or self.wake_key is None:
                await self._drop_tokens(spent)
                return  # plain arq: its poll() sleeps the rest of poll_delay
            await self._wait_for_work(left if again is None else max(0.001, min(left, again)), spent)

    def _spent_tokens(self) -> list[tuple[str, int]]:
        """Every enqueue pushes one wake token, so a look that took n jobs leaves behind the
        tokens of the jobs it took (n, less the one that woke it): drop that many of the oldest,
        or each would wake a worker for a look at a queue that no longer holds its job (a wake
        list read, a dispatch and a queue read each); batch lines' from their own list, the
        others' from the model's, and a second token of each job offered to this worker first from
        its own list (dispatch.lua drops those of jobs it gives to another worker). A token dropped
        in error costs at most a poll delay: the loop looks again every ``poll_delay``. They are
        dropped on the way to the next wait, in its round trip (``_wait_for_work``)."""
        lines = min(self._lines, self._taken)
        spent: dict[str | None, int] = {
            self.wake_key: self._taken - lines,
            self.spare_wake_key: lines,
            self.own_wake_key: self._offered,
        }
        if self._woken in spent:
            spent[self._woken] -= 1
        self._woken = None
        return [(key, n) for key, n in spent.items() if n > 0 and key is not None]

    @staticmethod
    def _trim(pipe: Any, spent: list[tuple[str, int]]) -> None:
        for key, n in spent:
            pipe.ltrim(key, 0, -n - 1)  # the n oldest

    async def _drop_tokens(self, spent: list[tuple[str, int]]) -> None:
        if spent:
            try:
                async with self.pool.pipeline(transaction=False) as pipe:
                    self._trim(pipe, spent)
                    await pipe.execute()
            except (RedisError, OSError) as e:  # a token left costs one look: see _spent_tokens
                log.warning("dropping spent wake tokens failed", error=str(e))

    async def _wait_for_work(self, timeout: float, spent: list[tuple[str, int]]) -> None:
        """Drop the spent wake tokens, then block until a job may be waiting: a wake token when a
        place is free (in the same round trip as the drop), else a place freeing (a job finished,
        or writing its ending: ``free_early``)."""
        if self.job_counter < self.max_jobs:
            try:
                lists = [self.own_wake_key, self.wake_key] if self.own_wake_key else [self.wake_key]
                if self.spare_wake_key and self.job_counter < self.slots:
                    lists.append(self.spare_wake_key)  # a batch line takes only a free engine slot
                async with self.pool.pipeline(transaction=False) as pipe:
                    self._trim(pipe, spent)
                    # BLPOP takes fractional seconds since Redis 6, though redis-py types the
                    # timeout as an int
                    pipe.blpop(lists, timeout=timeout)  # type: ignore[arg-type]
                    got = (await pipe.execute())[-1]
                self._woken = got[0].decode() if got else None
            except (RedisError, OSError):
                await asyncio.sleep(timeout)
        else:
            self._place_freed.clear()  # no await since the count was read: a later free sets it
            await self._drop_tokens(spent)  # a place freed meanwhile has set it again
            busy = [t for t in self.tasks.values() if not t.done()]
            if busy:
                freed = asyncio.ensure_future(self._place_freed.wait())
                try:
                    await asyncio.wait([*busy, freed], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    freed.cancel()
            else:
                await asyncio.sleep(min(timeout, 0.01))


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
    slots: int | None = None,
) -> WakeableWorker:
    """An arq worker for the model's queue that runs ``run(job id, attempt)`` for each job.

    ``on_startup`` gets the worker's Redis client once arq has connected; ``on_shutdown`` runs when
    arq closes. ``worker.ctx["worker_id"]`` is the id.
    """
    pool = arq_client(redis_url, default_queue_name=keys.queue(model))

    async def run_job(ctx: dict[str, Any], job_id: str, attempt: int) -> str:
        try:
            return await run(job_id, attempt)
        except arq_link.RunAgain as e:
            raise ArqRetry(defer=e.defer_s) from None

    async def startup(ctx: dict[str, Any]) -> None:
        await on_startup(ctx["redis"])

    async def shutdown(ctx: dict[str, Any]) -> None:
        await on_shutdown()

    worker = WakeableWorker(
        functions=[func(run_job, name=arq_link.RUN_JOB)],
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
        job_serializer=arq_link.pack,
        job_deserializer=arq_link.unpack,
        log_results=False,
        wake_key=keys.wake(model) if wake else None,
        own_wake_key=keys.worker_wake(model, worker_id) if wake else None,
        spare_wake_key=keys.spare_wake(model) if wake else None,
        slots=slots,
        feed=feed,
        handler=run,
        worker_id=worker_id,
        reserved_key=keys.affinity_reserved(model),
    )
    worker.ctx["worker_id"] = worker_id
    return worker
