"""When tracing is on, read from the standard ``OTEL_*`` variables.

Tracing is off unless an exporter is named: ``OTEL_TRACES_EXPORTER`` (``otlp`` or ``console``)
or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turns it off whatever else is set.
Everything else (sampler, batch delays, headers, resource attributes, timeouts) the
OpenTelemetry SDK reads from its own variables once it is on (toolq/tracing/provider.py).
"""

from __future__ import annotations

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EXPORTERS = ("otlp", "console")  # what toolq can build; "none" means off


class TracingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OTEL_", extra="ignore", env_ignore_empty=True)

    sdk_disabled: bool = False
    traces_exporter: str | None = None  # comma-separated, as the SDK reads it
    exporter_otlp_endpoint: str | None = None
    exporter_otlp_traces_endpoint: str | None = None
    service_name: str | None = None

    @field_validator("sdk_disabled", mode="before")
    @classmethod
    def _bool(cls, v: object) -> object:
        # the specification's rule: only "true" (any case) disables; anything else is false
        return str(v).strip().lower() == "true" if isinstance(v, str) else v

    def exporters(self) -> list[str]:
        """The exporters to build; empty means tracing stays off."""
        if self.sdk_disabled:
            return []
        named = [e.strip().lower() for e in (self.traces_exporter or "").split(",") if e.strip()]
        if not named:
            return ["otlp"] if (self.exporter_otlp_endpoint or self.exporter_otlp_traces_endpoint) else []
        return [] if "none" in named else named

    @property
    def enabled(self) -> bool:
        return bool(self.exporters())
