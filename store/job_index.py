"""Listing jobs: the newest jobs of a tenant (or of every tenant), filtered, and the paused ones.

A job's record is a hash of its own (store/records.py), so nothing in Redis could list them
without scanning the keyspace. ``submit.lua`` and ``thread_run.lua`` therefore add every new job
to two sorted sets of job id -> submit time (ms), its tenant's (``keys.tenant_jobs``) and every
tenant's (``keys.JOBS_ALL``), each trimmed to the newest ``INDEX_KEEP`` in the same step
(``lua/lib/job_index.lua``). Records expire a while after their job ends (emit.lua); a member whose
record is gone is dropped here when it is read.

Filters (status, model, tenant, a piece of the id, quarantined) are applied to the records as
they are read, newest first, and one listing reads at most ``SCAN_LIMIT`` members: a rare filter
over a long index answers with fewer rows and a cursor to read on, never with unbounded work. Paused jobs
come from ``keys.PAUSED`` (pause.lua), soonest deadline first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store import keys
from store.records import JobRecord
from toolq.wire.protocol import JobStatus

__all__ = ["INDEX_KEEP", "MAX_PAGE", "SCAN_LIMIT", "Cursor", "JobFilter", "JobPage", "JobRow", "paused", "recent"]

INDEX_KEEP = 10_000  # jobs each index keeps: the tenant's newest, and every tenant's newest
SCAN_LIMIT = 2_000  # index members one listing reads at most
MAX_PAGE = 200  # rows one listing returns at most
_CHUNK = 200  # members read (and records fetched in one pipeline) per round trip
_ROW_FIELDS = ("status", "model", "tenant", "created_ms", "finished_ms", "attempt", "quarantined")


@dataclass(frozen=True)
class JobRow:
    """One job as a list shows it: no request, no result."""

    job_id: str
    tenant: str
    model: str
    status: JobStatus
    created_ms: int
    finished_ms: int | None
    attempt: int
    quarantined: bool = False  # ended worker_lost after too many lost attempts (store/quarantine.py)


@dataclass(frozen=True)
class JobFilter:
    status: JobStatus | None = None
    model: str | None = None
    tenant: str | None = None  # None: every tenant the index holds
    id_part: str | None = None  # a piece of the job id
    quarantined: bool | None = None  # None: either

    def admits(self, row: JobRow) -> bool:
        return (
            (self.status is None or row.status is self.status)
            and (self.model is None or row.model == self.model)
            and (self.tenant is None or row.tenant == self.tenant)
            and (self.id_part is None or self.id_part in row.job_id)
            and (self.quarantined is None or row.quarantined is self.quarantined)
        )


@dataclass(frozen=True)
class Cursor:
    """Where a listing goes on: after the member ``job_id`` scored ``created_ms`` (members of one
    score come in reverse lexical order, so ties are neither lost nor repeated)."""

    created_ms: int
    job_id: str

    def text(self) -> str:
        return f"{self.created_ms}:{self.job_id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """ValueError when the text is not one ``text()`` wrote."""
        ms, sep, job_id = text.partition(":")
        if not sep or not job_id or not ms.isascii() or not ms.isdigit() or len(ms) > 15:
            raise ValueError("a cursor is <ms>:<job id>, as a listing's next_cursor gave it")
        return cls(int(ms), job_id)


@dataclass(frozen=True)
class JobPage:
    rows: list[JobRow]
    next_cursor: Cursor | None  # None: the index holds nothing older


def _text(v: bytes | None) -> str:
    return v.decode() if v is not None else ""


def _row(job_id: str, values: list[bytes | None], submitted: bool) -> JobRow | None:
    status, model, tenant, created, finished, attempt, quarantined = (_text(v) for v in values)
    if not submitted or not status:
        return None  # expired, or what a late write left of an expired job
    try:
        return JobRow(
            job_id=job_id,
            tenant=tenant,
            model=model,
            status=JobStatus(status),
            created_ms=int(created or 0),
            finished_ms=int(finished) if finished else None,
            attempt=int(attempt or 1),
            quarantined=quarantined == "1",
        )
    except ValueError:
        return None


async def recent(
    redis: Any, where: JobFilter, *, limit: int = 50, cursor: Cursor | None = None, scan_limit: int = SCAN_LIMIT
) -> JobPage:
    """The newest jobs that ``where`` admits, newest first, from ``where.tenant``'s index (every
    tenant's when None), starting after ``cursor``."""
    index = keys.tenant_jobs(where.tenant) if where.tenant is not None else keys.JOBS_ALL
    limit = max(1, min(limit, MAX_PAGE))
    rows: list[JobRow] = []
    top: str | int = "+inf" if cursor is None else cursor.created_ms
    after_id = None if cursor is None else cursor.job_id
    scanned = 0
    last: Cursor | None = None
    while len(rows) < limit and scanned < scan_limit:
        want = min(_CHUNK, scan_limit - scanned)
        # ties with the cursor's score are read again and skipped below, hence the extra room
        members = await redis.zrevrangebyscore(index, top, "-inf", start=0, num=want + 64, withscores=True)
        batch = [(m.decode(), int(s)) for m, s in members]
        if after_id is not None:
            batch = [(m, s) for m, s in batch if not (s == top and m >= after_id)]
        batch = batch[:want]
        if not batch:
            return JobPage(rows, None)
        async with redis.pipeline(transaction=False) as pipe:
            for job_id, _ in batch:
                pipe.hmget(keys.job(job_id), list(_ROW_FIELDS))
                pipe.hexists(keys.job(job_id), "request")
            got = await pipe.execute()
        stale = []
        for i, (job_id, score) in enumerate(batch):
            scanned += 1
            last = Cursor(score, job_id)
            row = _row(job_id, got[2 * i], bool(got[2 * i + 1]))
            if row is None:
                stale.append(job_id)
            elif where.admits(row):
                rows.append(row)
                if len(rows) == limit:
                    break
        if stale:
            await redis.zrem(index, *stale)
        assert last is not None
        top, after_id = last.created_ms, last.job_id
    return JobPage(rows, last)


async def paused(redis: Any, tenant: str | None, *, limit: int = 100, scan_limit: int = SCAN_LIMIT) -> list[JobRecord]:
    """The jobs waiting on their caller (status ``requires_action``), soonest deadline first:
    ``tenant``'s, or every tenant's when None."""
    limit = max(1, min(limit, MAX_PAGE))
    out: list[JobRecord] = []
    start = 0
    while len(out) < limit and start < scan_limit:
        ids = [m.decode() for m in await redis.zrange(keys.PAUSED, start, start + _CHUNK - 1)]
        if not ids:
            break
        start += len(ids)
        if tenant is not None:  # another tenant's records are not read: one field each says whose
            async with redis.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hget(keys.job(job_id), "tenant")
                owners = await pipe.execute()
            ids = [j for j, owner in zip(ids, owners, strict=True) if owner is not None and owner.decode() == tenant]
        async with redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(keys.job(job_id))
            hashes = await pipe.execute()
        for job_id, h in zip(ids, hashes, strict=True):
            if not h:
                continue  # expired; the pause sweep (store/pauses.py) drops it
            rec = JobRecord.from_hash(job_id, h)
            if rec.submitted and rec.paused and (tenant is None or rec.tenant == tenant):
                out.append(rec)
                if len(out) == limit:
                    break
    return out
