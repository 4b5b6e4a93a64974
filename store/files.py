"""Files of OpenAI's Files API (batch inputs, and the output and error files of batches), per tenant.

Kept in Redis, beside the jobs: every gateway of a fleet reads and writes the same files, as it
does jobs, and a batch's runner on any gateway finds its input there after a restart. Redis holds
them in memory, so a file is bounded (``max_bytes``) and so is each tenant's count of files
(``max_files``), and every file expires (``ttl_s``, OpenAI keeps batch files until deleted; a
queue cannot). Another tenant's file id is simply not found. A file's bytes count in its
tenant's share of Redis (store/byte_quota.py): an upload past it is refused, a batch's output
is counted.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from store import byte_quota
from store.admission import QueueBounds
from store.scripts import Script

__all__ = ["FileLimits", "FileStore", "FileTooLarge", "StoredFile", "TooManyFiles"]

_PREFIX = "toolq:file:"


def _meta_key(file_id: str) -> str:
    return f"{_PREFIX}{{{file_id}}}"


def _content_key(file_id: str) -> str:
    return f"{_PREFIX}{{{file_id}}}:content"


def _index_key(tenant: str) -> str:
    return f"toolq:files:{tenant}"


class FileTooLarge(ValueError):
    pass


class TooManyFiles(ValueError):
    pass


@dataclass(frozen=True)
class FileLimits:
    max_bytes: int = 16 << 20  # one file (OpenAI allows 200 MB; Redis holds this one in memory)
    max_files: int = 100  # live files per tenant
    ttl_s: int = 30 * 86400


@dataclass(frozen=True)
class StoredFile:
    id: str
    tenant: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    expires_at: int

    def openai(self) -> dict[str, Any]:
        """OpenAI's file object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


class FileStore:
    def __init__(self, redis: Any, limits: FileLimits | None = None, bounds: QueueBounds | None = None):
        self.redis = redis
        self.limits = limits or FileLimits()
        self.bounds = bounds or QueueBounds()  # each tenant's quota of bytes
        self._put = Script(redis, "file_put")

    async def put(self, tenant: str, filename: str, purpose: str, content: bytes, *, quota: bool = True) -> StoredFile:
        """Store a file. ``quota`` False: a batch's output, which its tenant did not upload, and
        which its lines bounded already, counts against neither the size nor the count, and its
        bytes are counted without a bound. Raises StoreQuotaExceeded past the tenant's bytes."""
        lim = self.limits
        if quota and len(content) > lim.max_bytes:
            raise FileTooLarge(
                f"the file is {len(content)} bytes, above the limit of {lim.max_bytes} (TOOLQ_MAX_FILE_BYTES)"
            )
        now = int(time.time())
        await self.redis.zremrangebyscore(_index_key(tenant), 0, now)  # expired ones leave the count
        held = await self.redis.zcard(_index_key(tenant))
        if quota and held >= lim.max_files:
            raise TooManyFiles(
                f"tenant {tenant!r} holds {held} files, its limit is {lim.max_files} (TOOLQ_MAX_FILES); delete some"
            )
        f = StoredFile(
            "file-" + secrets.token_hex(12), tenant, filename[:256], purpose, len(content), now, now + lim.ttl_s
        )
        code, *reply = await self._put(
            meta=_meta_key(f.id),
            content=_content_key(f.id),
            index=_index_key(tenant),
            tenant=tenant,
            file_id=f.id,
            record=json.dumps({k: str(v) for k, v in f.__dict__.items()}),
            data=content,
            ttl_s=lim.ttl_s,
            expires_at=f.expires_at,
            **byte_quota.script_args(self.bounds.byte_quota(tenant) if quota else None),
        )
        if int(code) == byte_quota.REFUSED:
            raise byte_quota.refusal(tenant, [code, *reply])
        return f

    async def get(self, tenant: str, file_id: str) -> StoredFile | None:
        h = await self.redis.hgetall(_meta_key(file_id))
        if not h:
            return None
        d = {k.decode(): v.decode() for k, v in h.items()}
        if d["tenant"] != tenant:
            return None
        return StoredFile(
            d["id"],
            d["tenant"],
            d["filename"],
            d["purpose"],
            int(d["bytes"]),
            int(d["created_at"]),
            int(d["expires_at"]),
        )

    async def content(self, tenant: str, file_id: str) -> bytes | None:
        if await self.get(tenant, file_id) is None:
            return None
        data = await self.redis.get(_content_key(file_id))
        return bytes(data) if data is not None else None

    async def delete(self, tenant: str, file_id: str) -> bool:
        if await self.get(tenant, file_id) is None:
            return False
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(_meta_key(file_id), _content_key(file_id))
            pipe.zrem(_index_key(tenant), file_id)
            await pipe.execute()
        await byte_quota.mark_gone(self.redis, tenant, "file", _content_key(file_id))
        return True

    async def of_tenant(self, tenant: str, *, purpose: str | None = None, limit: int = 100) -> list[StoredFile]:
        """The tenant's files, newest first (at most ``limit``; a tenant holds at most max_files)."""
        ids = await self.redis.zrevrangebyscore(_index_key(tenant), "+inf", int(time.time()))
        out = []
        for raw in ids:
            f = await self.get(tenant, raw.decode())
            if f is not None and (purpose is None or f.purpose == purpose):
                out.append(f)
        out.sort(key=lambda f: f.created_at, reverse=True)
        return out[:limit]
