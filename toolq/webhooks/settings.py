"""The webhook settings the gateway and the sender share (environment, prefix ``TOOLQ_WEBHOOK_``).

- ``TOOLQ_WEBHOOK_SECRETS``: JSON, tenant -> its signing secrets (``whsec_`` + base64), newest
  first. Every delivery carries one signature per secret, so during a rotation both the new and
  the old secret verify. A tenant with no secret cannot name a webhook (422).
- ``TOOLQ_WEBHOOK_DEFAULTS``: JSON, tenant -> ``{"url", "events"}``: the webhook of the tenant's
  jobs that name none.
- ``TOOLQ_WEBHOOK_ALLOW_PRIVATE``: send to loopback, link-local and private addresses too
  (toolq/webhooks/urls.py); off by default.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolq.webhooks.signing import secret_key
from toolq.wire.protocol import Webhook


class WebhookSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLQ_WEBHOOK_", extra="ignore")

    secrets: dict[str, list[str]] = Field(default_factory=dict)
    defaults: dict[str, Webhook] = Field(default_factory=dict)
    allow_private: bool = False

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for tenant, secrets in v.items():
            if not secrets:
                raise ValueError(f"tenant {tenant!r} has an empty list of webhook secrets")
            for s in secrets:
                try:
                    secret_key(s)
                except ValueError as e:
                    raise ValueError(f"a webhook secret of tenant {tenant!r}: {e}") from None
        return v
