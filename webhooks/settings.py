"""The sender's settings: the shared webhook settings (secrets, defaults, private addresses) plus
Redis, the retry schedule and the sender's own limits (environment, prefix ``TOOLQ_WEBHOOK_``,
Redis from ``TOOLQ_REDIS_URL``)."""

from __future__ import annotations

from pydantic import AliasChoices, Field, model_validator

from toolq.settings import DEFAULT_REDIS_URL
from toolq.webhooks.settings import WebhookSettings


class SenderSettings(WebhookSettings):
    redis_url: str = Field(default=DEFAULT_REDIS_URL, validation_alias=AliasChoices("TOOLQ_REDIS_URL", "redis_url"))

    # The retry schedule: the first retry after first_retry_s, each later one twice the one before
    # (at most max_retry_s), each with random jitter (a delay is drawn between half and all of it);
    # a retry that would start more than give_up_after_s after the first attempt is not made: the
    # delivery goes to the dead-letter list. The defaults span a day, as the spec suggests.
    first_retry_s: float = Field(default=5.0, gt=0)
    max_retry_s: float = Field(default=3600.0, gt=0)
    give_up_after_s: float = Field(default=86400.0, gt=0)

    timeout_s: float = Field(default=15.0, gt=0)  # one attempt, connect to last byte
    lease_s: float = Field(default=60.0, gt=0)  # a claimed delivery is claimed again after this (a dead sender)
    concurrency: int = Field(default=16, ge=1)  # attempts in flight at once
    keep_s: int = Field(default=7 * 86400, ge=60)  # how long delivered and dead deliveries are kept
    metrics_port: int | None = Field(default=None, ge=1, le=65535)

    @model_validator(mode="after")
    def _lease_covers_an_attempt(self) -> SenderSettings:
        if self.lease_s <= self.timeout_s:
            raise ValueError("lease_s must exceed timeout_s, or a slow attempt would be claimed again while it runs")
        return self
