"""Responses-API responses, stored per tenant (keys.response): the id OpenAI clients hold maps to
the toolq job that answers it, with the request the response echoes back. A record lives as long
as a job's events do (JobStore.event_ttl_s); another tenant's id is simply not found. The gateway's
Responses routes (gateway/openai/responses/) are its only users."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store import keys


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
    key = keys.response(tenant, stored.id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping=stored.to_hash())
        pipe.expire(key, ttl_s)
        await pipe.execute()


async def load_response(redis: Any, tenant: str, response_id: str) -> StoredResponse | None:
    """The tenant's response, or None when it has none of that id."""
    h = await redis.hgetall(keys.response(tenant, response_id))
    return StoredResponse.from_hash(h) if h else None


async def forget_response(redis: Any, tenant: str, response_id: str) -> None:
    await redis.delete(keys.response(tenant, response_id))
