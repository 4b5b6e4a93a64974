"""The SDK straight into Redis, for a service inside the same network: the same JobStore and fleet
view the gateway uses (no gateway hop, no key). Store errors become the SDK's in one table,
``STORE_ERRORS``, as httpx maps its transport's exceptions in one place.

A submission here passes every check that needs only Redis and the settings, read from the same
variables as the gateway's: the queue bounds and the tenant's ``max_queued`` / ``max_running``
(``TOOLQ_MAX_QUEUE_DEPTH``, ``TOOLQ_TENANTS``; the store applies them, store/admission.py),
the tenant's token budgets (toolq/budgets.py) and the webhook check and default
(``TOOLQ_WEBHOOK_*``: toolq/webhooks/target.py). What it cannot check: API keys (its tenant is
always ``DIRECT_TENANT``) and the gateway's request caps (``TOOLQ_MAX_MESSAGES``,
``TOOLQ_MAX_TOKENS_CAP`` and the rest of gateway/limits.py), which belong to the gateway's
settings; a service with Redis access is trusted that far.

Imported only by a Client made with ``redis_url``, so the HTTP mode needs neither arq nor the store.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import contextmanager

from store.admission import QueueBounds
from store.durability import NotReplicated
from store.errors import RedisConnectionError, RedisTimeoutError
from store.fleet import read_fleet
from store.jobstore import JobNotFound, JobStore, NotSubmitted, QueueAtLimit
from store.submission import Submission
from toolq import errors
from toolq.budgets import budget_refusal
from toolq.client.transport import Retryable, StreamEnded, caller_trace
from toolq.settings import AdmissionSettings
from toolq.webhooks.settings import WebhookSettings
from toolq.webhooks.target import settle_webhook
from toolq.wire.api import ApprovalDecision, JobView, ModelView, ToolResult, ToolSpec
from toolq.wire.protocol import ActionKind, Event, JobRequest, JobStatus

__all__ = ["DIRECT_TENANT", "STORE_ERRORS", "RedisTransport", "store_errors"]

DIRECT_TENANT = "default"  # direct-mode jobs belong to the tenant an open gateway uses

# Every error the store raises to the SDK, most specific first, as the error the gateway would
# answer for it (toolq.errors), given the store's exception and the job it was about.
STORE_ERRORS: tuple[tuple[type[Exception], Callable[[Exception, str], errors.ToolqError]], ...] = (
    (JobNotFound, lambda e, job_id: errors.JobNotFoundError.of(job_id)),
    (QueueAtLimit, lambda e, job_id: errors.QueueFull(f"{e}; retry later", retry_after_s=1)),
    (NotSubmitted, lambda e, job_id: errors.InvalidRequest(f"the job was not submitted: {e}")),
    (NotReplicated, lambda e, job_id: errors.NotReplicatedError(f"{e}; retry with the same idempotency key")),
)
# Redis away: worth reconnecting for while following events.
_OUTAGES = (RedisConnectionError, RedisTimeoutError, OSError)


@contextmanager
def store_errors(job_id: str = "") -> Iterator[None]:
    try:
        yield
    except tuple(e for e, _ in STORE_ERRORS) as e:
        sdk_error = next(make for kind, make in STORE_ERRORS if isinstance(e, kind))
        raise sdk_error(e, job_id) from None


class RedisTransport:
    def __init__(
        self, redis_url: str, admission: AdmissionSettings | None = None, webhooks: WebhookSettings | None = None
    ):
        admission = admission or AdmissionSettings()
        self.webhooks = webhooks or WebhookSettings()
        # a job submitted here takes the same fair turn (store/fair.py) and passes the same
        # queue bounds (store/admission.py) as one through a gateway
        self.store = JobStore.from_url(
            redis_url,
            fair=True,
            bounds=QueueBounds(admission.max_queue_depth, admission.tenants, admission.tenant_store_bytes),
        )

    async def aclose(self) -> None:
        await self.store.close()

    async def submit(self, request: JobRequest, idempotency_key: str | None) -> str:
        with store_errors():
            refused = await budget_refusal(self.store.redis, DIRECT_TENANT, self.store.bounds.policy(DIRECT_TENANT))
            if refused is not None:
                raise refused
            request = await settle_webhook(request, DIRECT_TENANT, self.webhooks)
            model = (await read_fleet(self.store.redis)).resolve(request)
            trace = caller_trace()  # the caller's span: the job's spans continue its trace
            job_id, _ = await self.store.submit(
                Submission(
                    request,
                    model=model,
                    tenant=DIRECT_TENANT,
                    idempotency_key=idempotency_key,
                    trace=trace,
                )
            )
        return job_id

    async def job(self, job_id: str) -> JobView:
        with store_errors(job_id):
            return (await self.store.record(job_id)).view()

    async def events(self, job_id: str, after: int) -> AsyncGenerator[Event, None]:
        try:
            with store_errors(job_id):
                rec = await self.store.record(job_id)
                if rec.terminal and after >= rec.seq:
                    raise StreamEnded()  # JobStore.follow would wait for an event that never comes
                async for event in self.store.follow(job_id, after):
                    if event is not None:
                        yield event
        except _OUTAGES as e:
            raise Retryable(str(e)) from e

    async def cancel(self, job_id: str) -> JobStatus:
        with store_errors(job_id):
            return await self.store.cancel(job_id)

    async def answer(self, job_id: str, answers: Sequence[ToolResult | ApprovalDecision], kind: ActionKind) -> JobView:
        with store_errors(job_id):
            await self.store.answer_actions(job_id, [(a.tool_call_id, a.answer()) for a in answers], kind)
        return await self.job(job_id)

    async def tools(self) -> list[ToolSpec]:
        return (await read_fleet(self.store.redis)).tool_specs()

    async def models(self) -> list[ModelView]:
        fleet = await read_fleet(self.store.redis)
        return await fleet.describe(self.store.redis, fleet.models())
