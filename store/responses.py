"""Responses-API responses, stored per tenant (keys.response): the id OpenAI clients hold maps to
the toolq job that answers it, with the request the response echoes back. A record lives as long
as a job's events do (JobStore.event_ttl_s); another tenant's id is simply not found. The gateway's
Responses routes (gateway/openai/responses/) are its only users."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store import byte_quota, keys
from store.scripts import Script


@dataclass
class StoredResponse:
    id: str
    job_id: str
    model: str
    created_at: int
    request: dict[str, Any]  # the Responses request as sent, minus its input
    instructions: int  # leading job messages that are the instructions (not carried to a next response)

    def to_hash(self) -> dict[str, str]:
        return {
            "id": self.id,
            "job_id": self.job_id,
            "model": self.model,
            "created_at": str(self.created_at),
            "request": json.dumps(self.request, ensure_ascii=False),
            "instructions": str(self.instructions),
        }

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes]) -> StoredResponse:
        d = {k.decode(): v.decode() for k, v in h.items()}
        return cls(
            id=d["id"],
            job_id=d["job_id"],
            model=d["model"],
            created_at=int(d["created_at"]),
            request=json.loads(d["request"]),
            instructions=int(d["instructions"]),
        )


async def save_response(redis: Any, tenant: str, stored: StoredResponse, ttl_s: int) -> None:
    """Keep the response for ``ttl_s``, its bytes counted in its tenant's (store/byte_quota.py)."""
    await Script(redis, "response_save")(
        response=keys.response(tenant, stored.id),
        tenant=tenant,
        fields=json.dumps(stored.to_hash(), ensure_ascii=False),
        ttl_s=ttl_s,
    )


async def load_response(redis: Any, tenant: str, response_id: str) -> StoredResponse | None:
    """The tenant's response, or None when it has none of that id."""
    h = await redis.hgetall(keys.response(tenant, response_id))
    return StoredResponse.from_hash(h) if h else None


async def forget_response(redis: Any, tenant: str, response_id: str) -> None:
    await redis.delete(keys.response(tenant, response_id))
    await byte_quota.mark_gone(redis, tenant, "job", keys.response(tenant, response_id))
