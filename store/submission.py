"""What crosses from Python into a submit: one typed object, so a caller names each part of a
job's submission once and the store alone turns it into the script's keys and arguments
(``JobStore.submit`` and store/lua/submit.lua)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING

from toolq.tenants import TenantPolicy
from toolq.wire.protocol import JobRequest

if TYPE_CHECKING:  # a type only: the store does not load the tracing package
    from toolq.tracing.carrier import TraceCarrier


@dataclass(frozen=True)
class Submission:
    """One job to record, announce and enqueue.

    ``model`` None only looks up the job that the idempotency key names (a caller whose own checks
    refused the job asks so whether it is a retry). ``max_queue_depth`` overrides the store's
    queue bounds' depth (store/admission.py). ``policy`` (default: the bounds' policy of the
    tenant) records the tenant's weight and running cap for the fair choice, and the job's token
    cap. ``trace``: the trace the job's spans continue (toolq/tracing/
    carrier.py), None none. ``prefer``: the worker the job is offered to first
    (store/affinity.py). ``unserved_waiting``: the model is declared and no worker serves it yet;
    the ``queued`` event says so, with this many jobs waiting. ``spare``: a job of spare capacity
    (a batch line), which the fair choice gives only to a worker's free engine slot, never to its
    interactive reserve (store/lua/dispatch.lua)."""

    request: JobRequest
    _: KW_ONLY
    model: str | None
    tenant: str = "default"
    idempotency_key: str | None = None
    max_queue_depth: int | None = None
    policy: TenantPolicy | None = None
    trace: TraceCarrier | None = None
    prefer: str | None = None
    unserved_waiting: int | None = None
    spare: bool = False
