"""The setting every toolq process shares: where Redis is (``TOOLQ_REDIS_URL``).

The worker's and the gateway's settings take their default from here, and `toolq demo` and the
container healthcheck read it through ``RedisSettings`` without importing either service.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class RedisSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore")

    redis_url: str = DEFAULT_REDIS_URL
