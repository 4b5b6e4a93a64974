"""Process start-up of `toolq webhooks`: settings, Redis, metrics, signals, the sender's loop."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import structlog
from pydantic import ValidationError
from pydantic_settings import SettingsError

from store import redis_urls
from store.arq_link import connect
from store.deliveries import Deliveries
from toolq.errors import CommandError
from toolq.field_errors import validation_message
from toolq.logs import configure_logging
from webhooks.settings import SenderSettings

log = structlog.get_logger("toolq.webhooks")


def load_settings(overrides: dict[str, Any]) -> SenderSettings:
    try:
        return SenderSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        raise CommandError(f"invalid setting: {validation_message(e)}") from None
    except SettingsError as e:  # a TOOLQ_WEBHOOK_ variable that is not the JSON it should be
        raise CommandError(f"invalid setting: {e}") from None


async def serve(settings: SenderSettings) -> None:
    from webhooks.sender import Sender

    redis = connect(settings.redis_url)  # an unreachable Redis is waited for, as by the other services
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sender = Sender(settings, Deliveries(redis))
    log.info(
        "webhook sender started",
        tenants_with_secrets=sorted(settings.secrets),
        allow_private=settings.allow_private,
        concurrency=settings.concurrency,
    )
    try:
        await sender.run(stop)
    finally:
        await redis.aclose()
    log.info("webhook sender stopped")


def run_sender(overrides: dict[str, Any]) -> int:
    configure_logging()
    settings = load_settings(overrides)
    try:
        redis_urls.check(settings.redis_url)
    except redis_urls.BadRedisURL as e:
        raise CommandError(str(e)) from None
    if settings.metrics_port:
        from webhooks.metrics import serve_metrics

        serve_metrics(settings.metrics_port)
    asyncio.run(serve(settings))
    return 0
