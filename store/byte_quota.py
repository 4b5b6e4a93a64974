"""Each tenant's share of Redis, counted in bytes: what store/lua/lib/tenant_bytes.lua needs, and
its refusal.

Counting items (jobs queued, threads, messages, files) bounds how many things a tenant keeps, not
how much: 2,000 messages of a megabyte each fit a thread's cap, and about a thousand such appends
fill a 1 GB Redis, after which every tenant's writes fail. So the scripts that write what a tenant
sends charge its bytes in the same step, and refuse past its quota (``store_bytes`` in
``TOOLQ_TENANTS``, else ``TOOLQ_TENANT_STORE_BYTES``) with a 429 that names the quota and what the
tenant holds; nothing of the refused request is written, and other tenants are not affected.

What is charged, as the bytes of the values written (Redis's own overhead a key, tens of bytes,
is not):
- a job (submit.lua): its request and its arq payload, held while its record lives (its
  result TTL after its end);
- a thread run (thread_run.lua): its record (request parts and arq payload, twice, as the run
  keeps them to start later) and the copy of the thread's history it starts with, taken as the
  thread's bytes when the run is queued;
- a thread's messages (thread_create.lua, thread_add.lua, and a run's output appended at its end
  is not refused but is counted at the thread's next charge: it is the model's, bounded by the
  run's max_tokens);
- a paused job's answers (answer.lua): what they add to its record's ``actions``;
- a file (store/files.py): its content;
- a Responses-API response kept for ``previous_response_id`` (response_save.lua): its request
  without its input, counted but not refused (its job was charged, and refused, before it).

Nobody releases bytes by hand: keys end by TTL or deletion in many places. Each charge first
looks at a few items whose time has come and releases those whose key is gone (tenant_bytes.lua),
so a tenant's count is never below what it keeps and returns to it within a few charges of a
key's end. A deletion the store makes itself (a file, a thread) marks its item due at once.
"""

from __future__ import annotations

from typing import Any

from store import keys
from toolq.errors import StoreQuotaExceeded

REFUSED = -30  # tenant_bytes.lua's refusal code


def script_args(quota: int | None) -> dict[str, Any]:
    """tenant_bytes.lua's inputs for a tenant whose quota is ``quota`` (None: counted, not bounded)."""
    return {"store_bytes": quota}


def refusal(tenant: str, reply: list[Any]) -> StoreQuotaExceeded:
    """The 429 of tenant_bytes.lua's refusal {-30, held, quota, add, jobs, threads, files}."""
    _, held, quota, add, jobs, threads, files = (int(v) for v in reply[:7])
    return StoreQuotaExceeded(
        f"tenant {tenant!r} keeps {held:,} bytes in the job store (jobs {jobs:,}, thread messages {threads:,}, "
        f"files {files:,}) and this request needs {add:,} more; its quota is {quota:,} bytes (store_bytes in "
        "TOOLQ_TENANTS, else TOOLQ_TENANT_STORE_BYTES). Delete threads or files it no longer needs, or wait "
        "for its finished jobs to expire",
        field="store_bytes",
    )


async def held(redis: Any, tenant: str) -> dict[str, int]:
    """What ``tenant`` keeps, as counted: ``total`` and each kind's bytes (``job``, ``thread``, ``file``)."""
    raw = await redis.hmget(keys.tenant_bytes(tenant), "#total", "#job", "#thread", "#file")
    return {k: int(v or 0) for k, v in zip(("total", "job", "thread", "file"), raw, strict=True)}


async def mark_gone(redis: Any, tenant: str, kind: str, key: str) -> None:
    """The store deleted ``key``: the tenant's next charge releases its bytes (tenant_bytes.lua)."""
    await redis.zadd(keys.tenant_bytes(tenant) + ":due", {f"{kind} {key}": 0}, xx=True)
