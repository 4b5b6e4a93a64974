"""Responses-API responses as the routes use them: a new id, and a stored response or OpenAI's
404. Kept in Redis by store/responses.py (per tenant; another tenant's id is simply not found)."""

from __future__ import annotations

import secrets
from typing import Any

from gateway.openai.errors import OpenAIError
from store.responses import StoredResponse, forget_response, load_response, save_response

__all__ = ["StoredResponse", "forget", "load", "new_response_id", "save"]


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(12)


async def save(redis: Any, tenant: str, stored: StoredResponse, ttl_s: int) -> None:
    await save_response(redis, tenant, stored, ttl_s)


async def load(redis: Any, tenant: str, response_id: str, *, param: str = "response_id") -> StoredResponse:
    found = await load_response(redis, tenant, response_id)
    if found is None:
        raise OpenAIError(404, f"No response found with id {response_id!r}.", param=param, code="not_found")
    return found


async def forget(redis: Any, tenant: str, response_id: str) -> None:
    await forget_response(redis, tenant, response_id)
