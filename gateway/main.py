"""`toolq gateway`: settings (flags override the environment), logging, then uvicorn."""

from __future__ import annotations

import logging
from typing import Any

import uvicorn
from pydantic import ValidationError

from gateway.app import create_app
from gateway.settings import GatewaySettings
from store import redis_urls
from toolq.errors import CommandError
from toolq.field_errors import validation_message
from toolq.logs import configure_logging
from toolq.tracing import configure_tracing, shutdown_tracing


def run_gateway(host: str | None = None, port: int | None = None, redis_url: str | None = None) -> int:
    overrides: dict[str, Any] = {
        k: v for k, v in {"host": host, "port": port, "redis_url": redis_url}.items() if v is not None
    }
    try:
        settings = GatewaySettings(**overrides)
    except ValidationError as e:  # a flag or a TOOLQ_ variable that cannot work: one line, not a traceback
        raise CommandError(f"invalid setting: {validation_message(e)}") from None
    try:
        redis_urls.check(settings.redis_url)  # parses only: a Redis that is down is for /readyz to report
    except redis_urls.BadRedisURL as e:
        raise CommandError(str(e)) from None
    level = getattr(logging, settings.log_level.upper(), logging.INFO)
    configure_logging(level)
    configure_tracing("toolq-gateway")  # before create_app, which installs the trace middleware when on
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.bind_host(),
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=5,
        )
    finally:
        shutdown_tracing()
    return 0
