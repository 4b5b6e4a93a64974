"""One attempt at sending one delivery: check the address again, connect only to it, POST.

What the receiver's answer means follows Standard Webhooks ("Delivery success and failure"): 2xx
is delivered; 410 Gone means it wants no more (dead at once); anything else, a timeout or a
refused connection, is tried again later, after at least the receiver's Retry-After. Redirects
are not followed (a 3xx is a failure). A URL the address check refuses is dead at once; a host
that does not resolve is tried again (DNS may come back).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import httpx

from toolq.webhooks.deliveries import Delivery
from toolq.webhooks.urls import Resolver, WebhookHostUnresolved, WebhookUrlRefused, check_url
from webhooks import payload

Kind = Literal["delivered", "retry", "dead"]


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    status_code: int | None = None
    error: str | None = None
    retry_after_s: float | None = None


def _retry_after(value: str | None) -> float | None:
    # Seconds only; an HTTP date is rare on webhooks and the backoff still applies without it.
    if value and value.strip().isdigit():
        return float(value.strip())
    return None


async def attempt(
    client: httpx.AsyncClient,
    d: Delivery,
    secrets: list[str],
    *,
    allow_private: bool,
    timeout_s: float,
    resolver: Resolver | None = None,
) -> Outcome:
    if not secrets:
        return Outcome("dead", error=f"no webhook secret is configured for tenant {d.tenant!r} (TOOLQ_WEBHOOK_SECRETS)")
    try:
        checked = await check_url(d.url, allow_private=allow_private, resolver=resolver, timeout_s=timeout_s)
    except WebhookUrlRefused as e:
        return Outcome("dead", error=str(e))
    except WebhookHostUnresolved as e:
        return Outcome("retry", error=str(e))
    body = payload.body(d)
    headers = payload.headers(d, secrets, body, int(time.time()))
    headers["host"] = checked.host_header
    # Connect to the checked address; TLS still verifies the certificate against the URL's name.
    extensions = {"sni_hostname": checked.hostname} if checked.scheme == "https" else {}
    try:
        async with client.stream(
            "POST", checked.pinned_url, content=body, headers=headers, extensions=extensions, timeout=timeout_s
        ) as r:
            status = r.status_code  # the receiver's body is not read: nothing in it matters
    except httpx.TimeoutException:
        return Outcome("retry", error=f"no answer within {timeout_s:g} s")
    except httpx.HTTPError as e:
        return Outcome("retry", error=f"{type(e).__name__}: {e}"[:500])
    if 200 <= status < 300:
        return Outcome("delivered", status_code=status)
    if status == 410:
        return Outcome("dead", status_code=status, error="the receiver answered 410 Gone: it wants no more deliveries")
    return Outcome(
        "retry",
        status_code=status,
        error=f"the receiver answered HTTP {status}",
        retry_after_s=_retry_after(r.headers.get("retry-after")),
    )
