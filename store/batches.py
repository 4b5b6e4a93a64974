"""Batches of OpenAI's Batch API: each line of an input file becomes one toolq job, fed to the queue
as the fleet has room for it, and its answer is written once into the batch's output or errors.

Redis keeps all of a batch's state, so a gateway that dies mid-batch loses nothing: another one
(or itself, restarted) takes the batch's lease and goes on from there.

- ``toolq:batch:{<id>}``: the batch (status, timestamps, counts' total, the feed cursor);
- ``...:lines``: the input's lines (a list, validated when the batch was created);
- ``...:jobs``: line index -> job id, for the lines fed and not yet answered;
- ``...:out`` and ``...:err``: custom_id -> the output (or error) line, written with HSETNX, so
  a line answered twice (a runner that died after writing, before it forgot the job) is written once;
- ``...:lease``: the runner holding the batch (SET NX PX);
- ``toolq:batches:active`` (batch id -> created) and ``toolq:batches:<tenant>`` (the tenant's).

A line's job is submitted with the idempotency key ``batch:<id>:<index>``, so feeding the same line
again after a crash finds the job already made (store/lua/submit.lua owns idempotency).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable
from typing import Any

from store.deliveries import queue_batch_end

__all__ = ["ACTIVE", "TERMINAL_STATUSES", "BatchStore"]

ACTIVE = "toolq:batches:active"
TERMINAL_STATUSES = ("failed", "completed", "expired", "cancelled")
_TIMESTAMPS = (
    "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at",
    "expired_at", "cancelling_at", "cancelled_at",
)  # fmt: skip


def _key(batch_id: str, part: str = "") -> str:
    return f"toolq:batch:{{{batch_id}}}" + (f":{part}" if part else "")


def _tenant_key(tenant: str) -> str:
    return f"toolq:batches:{tenant}"


class BatchStore:
    def __init__(self, redis: Any, keep_s: int = 30 * 86400):
        self.redis = redis
        self.keep_s = keep_s  # how long a batch and its lines are kept after creation

    # ---------------------------------------------------------------- creation and views

    async def create(
        self,
        tenant: str,
        *,
        endpoint: str,
        input_file_id: str,
        window_s: int,
        metadata: dict[str, str] | None,
        lines: list[str] | None,
        errors: list[dict[str, Any]] | None = None,
        model: str = "",
        webhook_url: str = "",
    ) -> str:
        """A new batch: ``in_progress`` with its lines, or ``failed`` with the errors of its file
        (announced to ``webhook_url`` in the same step, as ``finish`` does)."""
        batch_id = "batch_" + secrets.token_hex(12)
        now = int(time.time())
        rec: dict[str, str] = {
            "id": batch_id,
            "tenant": tenant,
            "endpoint": endpoint,
            "input_file_id": input_file_id,
            "completion_window": "24h",
            "created_at": str(now),
            "expires_at": str(now + window_s),
            "metadata": json.dumps(metadata) if metadata is not None else "",
            "total": str(len(lines or ())),
            "cursor": "0",
            "model": model,
            "webhook": webhook_url,  # where its end is announced, fixed when it was created
        }
        if errors:
            rec |= {"status": "failed", "failed_at": str(now), "errors": json.dumps(errors), "total": "0"}
        else:
            rec |= {"status": "in_progress", "in_progress_at": str(now)}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(_key(batch_id), mapping=rec)
            pipe.expire(_key(batch_id), self.keep_s)
            if lines and not errors:
                for i in range(0, len(lines), 1000):
                    pipe.rpush(_key(batch_id, "lines"), *lines[i : i + 1000])
                pipe.expire(_key(batch_id, "lines"), self.keep_s)
                pipe.zadd(ACTIVE, {batch_id: now})
            pipe.zadd(_tenant_key(tenant), {batch_id: now})
            pipe.expire(_tenant_key(tenant), self.keep_s)
            if errors:
                self._ended(pipe, rec, 0, 0)
            await pipe.execute()
        return batch_id

    async def record(self, batch_id: str, tenant: str | None = None) -> dict[str, str] | None:
        """The batch's fields; None when there is none (or it is another tenant's)."""
        h = await self.redis.hgetall(_key(batch_id))
        if not h:
            return None
        d = {k.decode(): v.decode() for k, v in h.items()}
        if tenant is not None and d.get("tenant") != tenant:
            return None
        return d

    async def view(self, batch_id: str, tenant: str | None = None) -> dict[str, Any] | None:
        """OpenAI's batch object."""
        d = await self.record(batch_id, tenant)
        if d is None:
            return None
        return _object(d, *await self.counts(batch_id))

    @staticmethod
    def _ended(pipe: Any, d: dict[str, str], completed: int, failed: int) -> None:
        """Queue, in the transaction that ends the batch, the announcement of its end to the
        webhook it names (``d`` as it will be): a gateway that dies between the two cannot
        leave an ended batch unannounced."""
        if d.get("webhook"):
            queue_batch_end(pipe, _object(d, completed, failed), d["tenant"], d["webhook"], int(time.time() * 1000))

    async def of_tenant(self, tenant: str, *, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """The tenant's batches, newest first, after the batch ``after``; and whether more follow."""
        ids = [i.decode() for i in await self.redis.zrevrange(_tenant_key(tenant), 0, -1)]
        if after is not None and after in ids:
            ids = ids[ids.index(after) + 1 :]
        out = []
        for batch_id in ids:
            v = await self.view(batch_id, tenant)
            if v is not None:
                out.append(v)
            if len(out) > limit:
                break
        return out[:limit], len(out) > limit

    async def counts(self, batch_id: str) -> tuple[int, int]:
        """(completed, failed): the lines answered so far."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hlen(_key(batch_id, "out"))
            pipe.hlen(_key(batch_id, "err"))
            out, err = await pipe.execute()
        return int(out), int(err)

    # ---------------------------------------------------------------- state changes

    async def request_cancel(self, batch_id: str) -> None:
        """``cancelling`` (the runner stops feeding, cancels the lines in flight, then finalizes)."""
        now = str(int(time.time()))
        await self.redis.hset(_key(batch_id), mapping={"status": "cancelling", "cancelling_at": now})

    async def set_status(self, batch_id: str, status: str) -> None:
        await self.redis.hset(_key(batch_id), mapping={"status": status, f"{status}_at": str(int(time.time()))})

    async def finish(
        self, batch_id: str, status: str, *, output_file_id: str | None, error_file_id: str | None
    ) -> None:
        """The batch ends ``status`` with its files, and its end is announced to the webhook it
        names, in one transaction."""
        now = str(int(time.time()))
        fields = {"status": status, f"{status}_at": now}
        fields |= {"output_file_id": output_file_id or "", "error_file_id": error_file_id or ""}
        before = await self.record(batch_id)
        if before is None:
            return  # expired meanwhile: nothing left to end or announce
        counts = await self.counts(batch_id)  # every line is answered: they move no more
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(_key(batch_id), mapping=fields)
            pipe.zrem(ACTIVE, batch_id)
            self._ended(pipe, before | fields, *counts)
            await pipe.execute()

    async def active(self) -> list[str]:
        return [i.decode() for i in await self.redis.zrange(ACTIVE, 0, -1)]

    async def take_lease(self, batch_id: str, holder: str, ms: int) -> bool:
        """Whether ``holder`` runs the batch for the next ``ms``: it took the lease or held it."""
        key = _key(batch_id, "lease")
        if await self.redis.set(key, holder, nx=True, px=ms):
            return True
        if (await self.redis.get(key) or b"").decode() == holder:
            await self.redis.pexpire(key, ms)
            return True
        return False

    # ---------------------------------------------------------------- lines

    async def next_lines(self, batch_id: str, cursor: int, n: int) -> list[str]:
        if n <= 0:
            return []
        return [x.decode() for x in await self.redis.lrange(_key(batch_id, "lines"), cursor, cursor + n - 1)]

    async def fed(self, batch_id: str, index: int, job_id: str) -> None:
        """Line ``index`` is job ``job_id``: the cursor moves past it."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(_key(batch_id, "jobs"), str(index), job_id)
            pipe.hset(_key(batch_id), "cursor", str(index + 1))
            pipe.expire(_key(batch_id, "jobs"), self.keep_s)
            await pipe.execute()

    async def skipped(self, batch_id: str, index: int) -> None:
        """Line ``index`` was answered without a job (refused): the cursor moves past it."""
        await self.redis.hset(_key(batch_id), "cursor", str(index + 1))

    async def in_flight(self, batch_id: str) -> dict[int, str]:
        return {int(k): v.decode() for k, v in (await self.redis.hgetall(_key(batch_id, "jobs"))).items()}

    async def answer(self, batch_id: str, index: int | None, custom_id: str, line: dict[str, Any], *, ok: bool) -> None:
        """Write a line's answer once (its custom_id's first answer wins) and forget its job."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(_key(batch_id, "out" if ok else "err"), custom_id, json.dumps(line, ensure_ascii=False))
            pipe.expire(_key(batch_id, "out" if ok else "err"), self.keep_s)
            if index is not None:
                pipe.hdel(_key(batch_id, "jobs"), str(index))
            await pipe.execute()

    async def answered(self, batch_id: str) -> set[str]:
        """The custom_ids answered so far (output or error)."""
        out = await self.redis.hkeys(_key(batch_id, "out"))
        err = await self.redis.hkeys(_key(batch_id, "err"))
        return {k.decode() for k in (*out, *err)}

    async def outputs(self, batch_id: str) -> tuple[list[str], list[str]]:
        """The output file's lines and the error file's."""
        out = await self.redis.hvals(_key(batch_id, "out"))
        err = await self.redis.hvals(_key(batch_id, "err"))
        return [v.decode() for v in out], [v.decode() for v in err]

    async def lines(self, batch_id: str, start: int = 0) -> Iterable[tuple[int, str]]:
        raw = await self.redis.lrange(_key(batch_id, "lines"), start, -1)
        return ((start + i, x.decode()) for i, x in enumerate(raw))


def _object(d: dict[str, str], completed: int, failed: int) -> dict[str, Any]:
    """OpenAI's batch object, of the batch's fields and its lines answered so far."""
    errors = json.loads(d["errors"]) if d.get("errors") else None
    return {
        "id": d["id"],
        "object": "batch",
        "endpoint": d["endpoint"],
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": d["input_file_id"],
        "completion_window": d["completion_window"],
        "status": d["status"],
        "output_file_id": d.get("output_file_id") or None,
        "error_file_id": d.get("error_file_id") or None,
        "created_at": int(d["created_at"]),
        **{t: (int(d[t]) if d.get(t) else None) for t in _TIMESTAMPS},
        "request_counts": {"total": int(d["total"]), "completed": completed, "failed": failed},
        "metadata": json.loads(d["metadata"]) if d.get("metadata") else None,
    }
