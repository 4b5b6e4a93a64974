"""Standard Webhooks signatures, for receivers of toolq's webhooks (and for its sender).

A delivery is an HTTP POST whose body is ``{"type": "job.completed", "timestamp": ..., "data": ...}``
with three headers (https://www.standardwebhooks.com):

- ``webhook-id``: the delivery's id, the same on every retry: use it to process an event once;
- ``webhook-timestamp``: when this attempt was signed (unix seconds);
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, one per secret
  the tenant has, space-separated (two while a secret is being rotated).

A receiver checks a delivery with ``verify_webhook(body, headers, secret)`` (or any Standard
Webhooks library, e.g. the ``standardwebhooks`` package); the secret is the ``whsec_...`` string
the operator gave the tenant (``TOOLQ_WEBHOOK_SECRETS``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

SECRET_PREFIX = "whsec_"
TOLERANCE_S = 5 * 60  # how far a signature's timestamp may be from the receiver's clock


class WebhookVerificationError(ValueError):
    """The delivery is not one this secret signed (or its timestamp is too old or too new)."""


def new_secret() -> str:
    """A fresh signing secret: 32 random bytes, base64, prefixed ``whsec_``."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_`` secret stands for; raises ValueError when it is not one."""
    text = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is 'whsec_' followed by base64") from None
    if len(key) < 24:
        raise ValueError("a webhook secret holds at least 24 bytes (Standard Webhooks)")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of one attempt."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(secrets_: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated (rotation)."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in secrets_)


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    raise WebhookVerificationError(f"the {name} header is missing")


def verify_webhook(
    payload: bytes | str, headers: Mapping[str, str], secret: str, *, tolerance_s: int = TOLERANCE_S
) -> dict[str, Any]:
    """Check a delivery and return its JSON body. Raises WebhookVerificationError.

    ``payload`` is the request body exactly as received (not parsed and dumped again);
    ``headers`` any mapping of the request's headers (names in any case).
    """
    body = payload.encode() if isinstance(payload, str) else payload
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    if not stamp.isascii() or not stamp.isdigit():
        raise WebhookVerificationError("the webhook-timestamp header is not a unix time in seconds")
    if abs(time.time() - int(stamp)) > tolerance_s:
        raise WebhookVerificationError("the webhook-timestamp is too far from now (a replay?)")
    expected = sign(secret, msg_id, int(stamp), body).encode()
    for sig in _header(headers, "webhook-signature").split():
        if hmac.compare_digest(sig.encode(), expected):
            try:
                parsed: dict[str, Any] = json.loads(body)
            except ValueError:
                raise WebhookVerificationError("the signed body is not JSON") from None
            return parsed
    raise WebhookVerificationError("no signature matches this secret")
