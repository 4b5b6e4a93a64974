"""Per-tenant policy: fair-share weight, running cap and token budgets, from configuration.

``TOOLQ_TENANTS`` (read by the gateway's and the worker's settings) is a JSON object from tenant
to policy; the tenant ``"*"`` is the default for every tenant not named, e.g.::

    {"*": {"weight": 1}, "acme": {"weight": 3, "max_running": 8, "max_queued": 200, "tokens_per_minute": 200000,
     "tokens_per_day": 20000000, "job_tokens": 50000}}

Where each part is enforced: the weight and the running cap by the fair choice of the next job
(store/lua/dispatch.lua, fed by each submit); the queued cap by every submission's
admission (store/admission.py); the per-minute and per-day budgets
in the same step, each job reserving its token ceiling (store/budget_holds.py; a 429 naming the
budget); the per-job cap by the worker, between rounds (the job ends
with ``error`` / ``budget_exceeded``); the bytes it keeps in Redis by every script that writes
what it sends (store/byte_quota.py; a 429 naming the quota).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_TENANT = "*"


class TenantPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: float = Field(default=1.0, gt=0, le=1000)  # share of starts under saturation
    max_running: int | None = Field(default=None, ge=1)  # most jobs running at once, all models
    # most jobs queued (waiting, thread runs included) per model; none: its fair share of a full
    # queue only (store/admission.py)
    max_queued: int | None = Field(default=None, ge=1)
    # threads kept (store/threads.py); none: the gateway's TOOLQ_MAX_THREADS / TOOLQ_MAX_THREAD_MESSAGES
    max_threads: int | None = Field(default=None, ge=1)
    max_thread_messages: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)  # prompt + completion, per clock minute
    tokens_per_day: int | None = Field(default=None, ge=1)  # per UTC day
    job_tokens: int | None = Field(default=None, ge=1)  # one job, all its rounds
    # bytes kept in Redis: job records, thread messages, files (store/byte_quota.py); none: the
    # gateway's TOOLQ_TENANT_STORE_BYTES
    store_bytes: int | None = Field(default=None, ge=1)


def parse_tenants(value: Any) -> dict[str, TenantPolicy]:
    """The ``tenants`` setting: a JSON text or a mapping (pydantic validates each policy)."""
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text else {}
    if not isinstance(value, dict):
        raise ValueError('TOOLQ_TENANTS is a JSON object: {"tenant": {"weight": 2, ...}, "*": {...}}')
    return {str(k): v if isinstance(v, TenantPolicy) else TenantPolicy.model_validate(v) for k, v in value.items()}


def policy_of(tenants: dict[str, TenantPolicy], tenant: str) -> TenantPolicy:
    """The tenant's own policy, else the default ``"*"``, else no limits and weight 1."""
    return tenants.get(tenant) or tenants.get(DEFAULT_TENANT) or TenantPolicy()
