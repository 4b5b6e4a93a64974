"""Admission to a model's queue: the bounds every submission passes, whichever door it came by.

The bounds live in the store (``JobStore(bounds=...)``), not in the doors: the submit script
(store/lua/submit.lua) and a thread run's script (thread_run.lua) both call admit.lua, in
the same step that writes the job, so POST /v1/jobs, the OpenAI endpoints, thread and
conversation runs and the SDK's Redis mode all get the same answer, atomically.

**The rule: fair admission.** A tenant's queued jobs of a model are its jobs waiting for a fair
turn (store/fair.py) plus its thread runs waiting behind their thread's active run.

- A tenant with ``max_queued`` (TOOLQ_TENANTS, per model) queued jobs is refused, whatever the
  others do: "tenant 'a' has 12 queued jobs of model 'm', its limit is 12 (max_queued)".
- Below ``max_queue_depth`` jobs in all (every tenant's, and arq's queue), everyone is admitted:
  one tenant alone may use the whole depth.
- At or past it, a tenant is admitted only while it holds fewer than its *share*,
  ``max(1, max_queue_depth // n)`` with ``n`` the tenants holding jobs, itself included. The
  tenant that filled the queue is refused, naming its share; a tenant with fewer is still admitted
  (as Temporal's fairness keys and Hatchet's concurrency keys admit per key, not per queue).
- At twice ``max_queue_depth`` everyone is refused: late-comers' shares can take the queue past
  its depth, never past that, which is what bounds Redis's memory for queued jobs.

Without fair share (``TOOLQ_FAIR_SHARE=false``) no per-tenant count is kept and
``max_queue_depth`` is a plain limit for everyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolq.tenants import TenantPolicy, policy_of


class NotSubmitted(Exception):
    """submit made no job: it was given no model and the idempotency key names no job."""


class QueueAtLimit(NotSubmitted):
    """submit made no job: the model's queue is full for everyone (``max_queue_depth``, or its
    ceiling of twice that when shares took it past)."""

    def __init__(self, model: str, depth: int, limit: int, message: str | None = None):
        super().__init__(message or f"the queue of model {model!r} is full ({depth} jobs, limit {limit})")
        self.model, self.depth, self.limit = model, depth, limit


class TenantQueueAtLimit(QueueAtLimit):
    """submit made no job: the tenant holds its own limit of queued jobs of the model (its
    ``max_queued``, or its share of a full queue); other tenants may still be admitted."""

    def __init__(self, model: str, tenant: str, count: int, limit: int, why: str):
        super().__init__(
            model,
            count,
            limit,
            f"tenant {tenant!r} has {count} queued jobs of model {model!r}, its limit is {limit} ({why})",
        )
        self.tenant = tenant


@dataclass(frozen=True)
class QueueBounds:
    """What admit.lua enforces for a store: the model's depth and each tenant's policy."""

    max_queue_depth: int | None = None
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)
    store_bytes: int | None = None  # each tenant's bytes in Redis unless its policy says (store/byte_quota.py)

    def policy(self, tenant: str) -> TenantPolicy:
        return policy_of(dict(self.tenants), tenant)

    def byte_quota(self, tenant: str) -> int | None:
        """The bytes ``tenant`` may keep in Redis; None: no quota (0 in the settings means none)."""
        return self.policy(tenant).store_bytes or self.store_bytes or None

    def script_args(self, tenant: str, max_queue_depth: int | None = None) -> dict[str, Any]:
        """admit.lua's inputs (``max_queue_depth`` given here overrides the store's)."""
        return {
            "max_depth": max_queue_depth if max_queue_depth is not None else self.max_queue_depth,
            "max_queued": self.policy(tenant).max_queued,
        }


def refusal(
    code: int, count: int, limit: int, tenants: int, *, model: str, tenant: str, depth: int | None
) -> QueueAtLimit:
    """The exception of admit.lua's refusal ``{code, count, limit, tenants}``."""
    if code == -3:
        return TenantQueueAtLimit(model, tenant, count, limit, "max_queued in TOOLQ_TENANTS")
    if code == -4:
        n = f"{tenants} tenant{'s' if tenants > 1 else ''}"
        why = f"its share while the queue is full: max_queue_depth {depth} over {n} with jobs queued"
        return TenantQueueAtLimit(model, tenant, count, limit, why)
    if depth is not None and limit > depth:
        return QueueAtLimit(
            model, count, limit, f"the queue of model {model!r} is full ({count} jobs, twice max_queue_depth {depth})"
        )
    return QueueAtLimit(model, count, limit)
