"""The settings every toolq process shares: where Redis is (``TOOLQ_REDIS_URL``, any URL of
store/redis_urls.py, Sentinel included) and what an acknowledgement waits for
(``TOOLQ_REDIS_WAIT_REPLICAS``, ``TOOLQ_REDIS_WAIT_TIMEOUT_MS``: store/durability.py).

The worker's and the gateway's settings take their default from here, and `toolq demo` and the
container healthcheck read it through ``RedisSettings`` without importing either service.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from toolq.tenants import TenantPolicy, parse_tenants

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class RedisSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore")

    redis_url: str = DEFAULT_REDIS_URL
    # 0: acknowledge once the primary has the write. N: only once N replicas have it too (WAIT),
    # waiting at most the timeout; every process that acknowledges something reads both.
    redis_wait_replicas: int = Field(default=0, ge=0)
    redis_wait_timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    # a worker about to run tools keeps confirming its announcement this long before it gives up
    redis_wait_hold_s: float = Field(default=15.0, gt=0)


DEFAULT_MAX_QUEUE_DEPTH = 1000  # per model: the gateway's TOOLQ_MAX_QUEUE_DEPTH too
# Bytes a tenant may keep in Redis (store/byte_quota.py), TOOLQ_TENANT_STORE_BYTES; a quarter of
# compose's 1 GB maxmemory, so one tenant never fills the store for the others. 0: no quota.
DEFAULT_TENANT_STORE_BYTES = 256 << 20


class AdmissionSettings(BaseSettings):
    """The queue bounds the SDK's Redis mode applies to its submissions, read from the same
    variables as the gateway's (``TOOLQ_MAX_QUEUE_DEPTH``, ``TOOLQ_TENANTS``,
    ``TOOLQ_TENANT_STORE_BYTES``), so a job submitted straight into Redis is admitted as one
    through a gateway (store/admission.py, store/byte_quota.py)."""

    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore")

    max_queue_depth: int = Field(default=DEFAULT_MAX_QUEUE_DEPTH, ge=1)
    tenant_store_bytes: int = Field(default=DEFAULT_TENANT_STORE_BYTES, ge=0)
    tenants: Annotated[dict[str, TenantPolicy], NoDecode] = Field(default_factory=dict)

    @field_validator("tenants", mode="before")
    @classmethod
    def _parse_tenants(cls, v: Any) -> Any:
        return parse_tenants(v)
