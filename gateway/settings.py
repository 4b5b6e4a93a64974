"""Gateway settings, from the environment (prefix TOOLQ_) or `toolq gateway` flags.

``TOOLQ_API_KEYS`` maps keys to tenants: ``key1:tenantA,key2:tenantB`` (or a JSON object). With no
keys the gateway serves everyone as tenant ``default`` and binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from store import affinity
from toolq.settings import DEFAULT_MAX_QUEUE_DEPTH, DEFAULT_REDIS_URL, DEFAULT_TENANT_STORE_BYTES
from toolq.tenants import TenantPolicy, parse_tenants
from toolq.wire.thread_api import MAX_TTL_S

DEFAULT_PORT = 8000
OPEN_TENANT = "default"  # the tenant of every caller when no keys are configured


def _comma_list(v: Any) -> Any:
    """A list setting from the environment: "a,b" or a JSON list."""
    if not isinstance(v, str):
        return v
    text = v.strip()
    if text.startswith("["):
        return json.loads(text)
    return [k.strip() for k in text.split(",") if k.strip()]


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore")

    redis_url: str = DEFAULT_REDIS_URL
    host: str | None = None  # default: 0.0.0.0 with keys configured, else 127.0.0.1
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    # NoDecode: pydantic-settings would json-decode a mapping from the environment; we also accept
    # the "key:tenant,..." form that fits in a compose file or a k8s secret.
    api_keys: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)

    # Limits (every one answers 4xx naming itself when exceeded)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    # How much more of an oversized body is read and dropped so its sender can read the 413
    # (gateway/limits.py); past it the connection is closed.
    body_drain_bytes: int = Field(default=16 << 20, ge=0)
    # OpenAI's Files and Batch API (gateway/openai/files.py, gateway/openai/batches/)
    max_file_bytes: int = Field(default=16 << 20, ge=1024)  # one uploaded file, kept in Redis
    max_files: int = Field(default=100, ge=1)  # live files per tenant
    file_ttl_s: int = Field(default=30 * 86400, ge=60)
    batch_max_lines: int = Field(default=50_000, ge=1)
    batch_window_s: int = Field(default=24 * 3600, ge=1)  # "24h", the only window OpenAI takes; lower it for tests
    batch_max_in_flight: int = Field(default=64, ge=1)  # lines of one batch queued or running at once
    # slots per worker batches leave free while other work was seen lately, on a worker without
    # an interactive reserve (TOOLQ_INTERACTIVE_RESERVE, jobs beyond its slots that lines never fill)
    batch_headroom_slots: int = Field(default=1, ge=0)
    max_messages: int = Field(default=256, ge=1)
    max_tokens_cap: int = Field(default=4096, ge=1)
    max_iterations_cap: int = Field(default=20, ge=1)
    timeout_cap_s: float = Field(default=3600.0, gt=0)
    action_timeout_cap_s: float = Field(default=86400.0, gt=0)  # how long a paused job may wait on its caller
    # per model: jobs queued (waiting or on arq's queue); past it each tenant keeps its share, up
    # to twice this in all (store/admission.py)
    max_queue_depth: int = Field(default=DEFAULT_MAX_QUEUE_DEPTH, ge=1)
    retry_after_s: int = Field(default=2, ge=1)
    # Threads (store/threads.py): the TTL of a thread created without one (refreshed by each
    # write), live threads per tenant, messages per thread; TOOLQ_TENANTS may set the caps per tenant
    thread_ttl_s: int = Field(default=30 * 86400, ge=60, le=MAX_TTL_S)
    max_threads: int = Field(default=10_000, ge=1)
    max_thread_messages: int = Field(default=2_000, ge=1)
    # Bytes each tenant keeps in Redis (job records, thread messages, files: store/byte_quota.py);
    # TOOLQ_TENANTS' store_bytes sets it per tenant. 0: no quota.
    tenant_store_bytes: int = Field(default=DEFAULT_TENANT_STORE_BYTES, ge=0)
    # Per-tenant weight, running cap and token budgets (toolq/tenants.py), JSON; "*" is the default.
    tenants: Annotated[dict[str, TenantPolicy], NoDecode] = Field(default_factory=dict)
    # Fair share between tenants (store/fair.py); off: one first-in first-out queue per model.
    fair_share: bool = True
    # Affinity (store/affinity.py): how long a job that continues a conversation is left to
    # the worker holding it before any worker may take it; 0 turns affinity off. Needs fair share.
    affinity_wait_ms: int = Field(default=affinity.DEFAULT_WAIT_MS, ge=0, le=affinity.MAX_WAIT_MS)

    # The dashboard (gateway/ui/). Operator keys sign in there and see every tenant's jobs; they
    # are not API keys ("k1,k2" or a JSON list). The secret signs the dashboard's session cookie:
    # set the same one on every replica behind one address (default: a random one per process, so
    # a restart signs everyone out).
    operator_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ui_secret: SecretStr | None = None
    ui_session_s: int = Field(default=8 * 3600, ge=60, le=30 * 86400)

    # Wrong keys per client address (gateway/wrong_keys.py): past the limit in the window, every
    # key from that address gets 429 until the window ends.
    wrong_key_limit: int = Field(default=20, ge=1)
    wrong_key_window_s: int = Field(default=300, ge=1, le=86400)
    # Host names an open gateway answers (gateway/browser_guard.py), besides localhost, 127.0.0.1,
    # [::1] and the bound host ("a,b" or a JSON list; "*" answers every name). With API keys the
    # Host check applies only when this is set.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Followers of job events (store/event_hub.py, gateway/followers.py), per gateway process
    max_followers_per_tenant: int = Field(default=100, ge=1)  # SSE streams and waits on a job's end
    follower_queue: int = Field(default=256, ge=1)  # events a follower may lag before it re-reads the stream
    follower_reads: int = Field(default=4, ge=1)  # stream reads at once (each borrows a pooled connection)

    # Behaviour
    keepalive_s: float = Field(default=15.0, gt=0)  # SSE comment while a job is quiet
    fleet_cache_s: float = Field(default=0.5, ge=0)  # how stale the gateway's view of the fleet may be
    # Models accepted before any worker serves them (scale from zero, store/fleet.py):
    # "name:slots,..." (name = the queue, the worker's TOOLQ_MODEL_NAME; slots = one worker's
    # --slots, default 1) or a JSON object {"name": slots}.
    declared_models: Annotated[dict[str, int], NoDecode] = Field(default_factory=dict)
    log_level: str = "info"

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_keys(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        text = v.strip()
        if not text:
            return {}
        if text.startswith("{"):
            return json.loads(text)
        keys: dict[str, str] = {}
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, tenant = part.rpartition(":")
            if not sep or not key or not tenant:
                raise ValueError("TOOLQ_API_KEYS entries are key:tenant, separated by commas")
            keys[key] = tenant
        return keys

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, v: Any) -> Any:
        return _comma_list(v)

    @field_validator("declared_models", mode="before")
    @classmethod
    def _parse_declared(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        text = v.strip()
        if text.startswith("{"):
            return json.loads(text)
        models: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, slots = part.partition(":")
            models[name.strip()] = slots.strip() or 1
        return models

    @field_validator("declared_models")
    @classmethod
    def _declared_shape(cls, v: dict[str, int]) -> dict[str, int]:
        for name, slots in v.items():
            if not name or len(name) > 256 or slots < 1:
                raise ValueError("TOOLQ_DECLARED_MODELS entries are name:slots, a non-empty name and slots >= 1")
        return v

    @field_validator("operator_keys", mode="before")
    @classmethod
    def _parse_operator_keys(cls, v: Any) -> Any:
        return _comma_list(v)

    @field_validator("operator_keys")
    @classmethod
    def _no_empty_operator_key(cls, v: list[str]) -> list[str]:
        if any(not k for k in v):
            raise ValueError("an operator key must be non-empty")
        return v

    @field_validator("ui_secret", mode="before")
    @classmethod
    def _empty_secret_is_none(cls, v: Any) -> Any:
        # an empty variable (a compose file's default) means "a random secret", never an empty key
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("tenants", mode="before")
    @classmethod
    def _parse_tenants(cls, v: Any) -> Any:
        return parse_tenants(v)

    @field_validator("api_keys")
    @classmethod
    def _no_empty(cls, v: dict[str, str]) -> dict[str, str]:
        if any(not k or not t for k, t in v.items()):
            raise ValueError("an API key and its tenant must both be non-empty")
        return v

    @property
    def open_access(self) -> bool:
        return not self.api_keys

    def bind_host(self) -> str:
        # Without keys anyone who can reach the port can run jobs: stay on localhost unless asked.
        return self.host or ("127.0.0.1" if self.open_access else "0.0.0.0")
