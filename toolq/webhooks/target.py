"""A job's webhook at submission: the request's own, else the tenant's default; a URL the caller
gave is checked here (toolq/webhooks/urls.py) and refused with a 422 that says why, before the job
exists. Every front door calls ``settle_webhook``: the gateway's (gateway/submission.py: admit)
and the SDK's Redis mode (toolq/client/redis_transport.py)."""

from __future__ import annotations

from toolq.errors import InvalidRequest
from toolq.webhooks.settings import WebhookSettings
from toolq.webhooks.urls import Resolver, WebhookHostUnresolved, WebhookUrlRefused, check_url
from toolq.wire.protocol import JobRequest

REFUSED = "webhook_refused"  # the error code of a refused webhook


async def settle_webhook(
    request: JobRequest,
    tenant: str,
    settings: WebhookSettings,
    resolver: Resolver | None = None,
    *,
    use_default: bool = True,
) -> JobRequest:
    """The request with the webhook the job reports to; raises InvalidRequest (422) naming why not.
    ``use_default`` False: a job that names none reports to none (a batch's line: its batch
    announces its own end instead)."""
    if request.webhook is None:
        if not use_default:
            return request
        default = settings.defaults.get(tenant)
        return request if default is None else request.model_copy(update={"webhook": default})
    if not settings.secrets.get(tenant):
        raise InvalidRequest(
            f"tenant {tenant!r} has no webhook signing secret, so its jobs cannot name a webhook; "
            "the operator sets one in TOOLQ_WEBHOOK_SECRETS",
            field="webhook",
            code=REFUSED,
        )
    try:
        await check_url(request.webhook.url, allow_private=settings.allow_private, resolver=resolver)
    except (WebhookUrlRefused, WebhookHostUnresolved) as e:
        raise InvalidRequest(str(e), field="webhook.url", code=REFUSED) from None
    return request
