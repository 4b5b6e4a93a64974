"""`toolq gateway`: settings (flags override the environment), logging, then uvicorn."""

from __future__ import annotations

import logging
from typing import Optional

import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings
from toolq.logs import configure_logging


def run_gateway(host: Optional[str] = None, port: Optional[int] = None, redis_url: Optional[str] = None) -> int:
    overrides = {k: v for k, v in {"host": host, "port": port, "redis_url": redis_url}.items() if v is not None}
    settings = GatewaySettings(**overrides)
    level = getattr(logging, settings.log_level.upper(), logging.INFO)
    configure_logging(level)
    uvicorn.run(create_app(settings), host=settings.bind_host(), port=settings.port,
                log_level=settings.log_level.lower(), access_log=False, timeout_graceful_shutdown=5)
    return 0
