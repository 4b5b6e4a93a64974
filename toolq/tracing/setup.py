"""Turning tracing on for a process, and flushing it when the process ends.

Each service calls ``configure_tracing`` once at start (`toolq gateway`, `toolq worker`,
`toolq tools serve`) and ``shutdown_tracing`` when it stops. With tracing off
(toolq/tracing/settings.py) neither does anything: no SDK import, no provider, no thread.
"""

from __future__ import annotations

import structlog
from opentelemetry import trace

from toolq.tracing import switch
from toolq.tracing.settings import TracingSettings

log = structlog.get_logger("toolq.tracing")

_provider: object | None = None  # the SDK provider this module installed


def configure_tracing(service_name: str, settings: TracingSettings | None = None) -> bool:
    """Install the SDK's tracer provider when the ``OTEL_*`` variables ask for it; True when
    this process now traces. A provider the program installed itself is kept and used."""
    global _provider
    if switch.on():
        return True
    settings = settings or TracingSettings()
    exporters = settings.exporters()
    if not exporters:
        return False
    if type(trace.get_tracer_provider()).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider"):
        switch.turn_on()  # the program's own provider: use it as it is
        return True
    try:
        from toolq.tracing.provider import build_provider

        provider = build_provider(service_name, exporters)
    except ImportError as e:
        log.warning(
            "tracing is asked for but the OpenTelemetry SDK is missing: pip install 'toolq[otel]'", error=str(e)
        )
        return False
    except ValueError as e:
        log.warning("tracing stays off", error=str(e))
        return False
    trace.set_tracer_provider(provider)
    _provider = provider
    switch.turn_on()
    log.info("tracing on", service=service_name, exporters=exporters)
    return True


def shutdown_tracing() -> None:
    """Export what is batched and stop (a no-op when this module installed no provider)."""
    global _provider
    provider, _provider = _provider, None
    if provider is not None:
        switch.turn_off()
        provider.shutdown()  # type: ignore[attr-defined]
