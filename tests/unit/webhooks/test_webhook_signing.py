"""Standard Webhooks signatures: toolq's signing checked by the spec's own library
(`standardwebhooks`), the library's signing checked by ``toolq.verify_webhook``, rotation with two
secrets, and the retry schedule."""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone

import pytest
from standardwebhooks.webhooks import Webhook as SpecWebhook
from standardwebhooks.webhooks import WebhookVerificationError as SpecError

import toolq
from toolq.webhooks.deliveries import Delivery
from toolq.webhooks.signing import WebhookVerificationError, new_secret, secret_key, signature_header
from webhooks import payload
from webhooks.backoff import retry_delay_s

NEW, OLD = new_secret(), new_secret()


def delivery() -> Delivery:
    return Delivery(
        id="msg_0123abcd",
        job_id="job_1",
        tenant="t",
        url="https://example.com/hook",
        type="completed",
        status="pending",
        created_ms=1_700_000_000_000,
        event={
            "job_id": "job_1",
            "seq": 4,
            "type": "final",
            "ts": 1_700_000_000_123,
            "data": {"result": {"content": "é"}},
        },
    )


def test_a_delivery_signed_with_two_secrets_verifies_with_either_in_the_spec_library():
    d = delivery()
    body = payload.body(d)
    headers = payload.headers(d, [NEW, OLD], body, int(time.time()))
    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (NEW, OLD):
        assert SpecWebhook(secret).verify(body, headers)["data"]["event"]["seq"] == 4
    with pytest.raises(SpecError):
        SpecWebhook(new_secret()).verify(body, headers)
    with pytest.raises(SpecError):
        SpecWebhook(NEW).verify(body.replace(b"job_1", b"job_2"), headers)


def test_the_body_is_the_same_bytes_on_every_attempt_and_follows_the_spec_shape():
    d = delivery()
    assert payload.body(d) == payload.body(delivery())
    doc = SpecWebhook(NEW).verify(payload.body(d), payload.headers(d, [NEW], payload.body(d), int(time.time())))
    assert doc["type"] == "job.completed"
    assert datetime.fromisoformat(doc["timestamp"].replace("Z", "+00:00")) == datetime.fromtimestamp(
        1_700_000_000.123, tz=timezone.utc
    )


def test_verify_webhook_checks_what_the_spec_library_signs():
    msg_id, now = "msg_spec1", datetime.now(tz=timezone.utc)
    body = '{"type":"job.failed","timestamp":"x","data":{}}'
    sig = SpecWebhook(OLD).sign(msg_id, now, body)
    headers = {"Webhook-Id": msg_id, "Webhook-Timestamp": str(int(now.timestamp())), "Webhook-Signature": sig}
    assert toolq.verify_webhook(body, headers, OLD)["type"] == "job.failed"
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        toolq.verify_webhook(body, headers, NEW)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        toolq.verify_webhook(body + " ", headers, OLD)
    stale = {**headers, "Webhook-Timestamp": str(int(now.timestamp()) - 3600)}
    with pytest.raises(WebhookVerificationError, match="too far"):
        toolq.verify_webhook(body, stale, OLD)
    with pytest.raises(WebhookVerificationError, match="webhook-signature header is missing"):
        toolq.verify_webhook(body, {k: v for k, v in headers.items() if k != "Webhook-Signature"}, OLD)


def test_secrets_are_whsec_base64_of_at_least_24_bytes():
    assert len(secret_key(new_secret())) == 32
    for bad in ("whsec_not base64!", "whsec_" + "QUJD"):
        with pytest.raises(ValueError, match="webhook secret"):
            secret_key(bad)
    with pytest.raises(ValueError):
        signature_header(["whsec_QUJD"], "msg_1", 1, b"{}")


def test_retries_back_off_exponentially_with_jitter_capped_and_respect_retry_after():
    rng = random.Random(7)
    for attempt in range(1, 12):
        base = min(60.0, 2.0 * 2 ** (attempt - 1))
        d = retry_delay_s(attempt, first_s=2.0, max_s=60.0, rng=rng)
        assert base / 2 <= d <= base
    draws = {round(retry_delay_s(3, first_s=2.0, max_s=60.0, rng=rng), 6) for _ in range(20)}
    assert len(draws) > 10  # jittered, not one fixed value
    assert retry_delay_s(1, first_s=2.0, max_s=60.0, retry_after_s=30, rng=rng) >= 30
    assert retry_delay_s(1, first_s=2.0, max_s=60.0, retry_after_s=10_000, rng=rng) <= 60
