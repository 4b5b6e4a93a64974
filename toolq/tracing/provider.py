"""The SDK's tracer provider, built only when tracing is on (the only module that imports the
OpenTelemetry SDK and its exporters; tests/unit/tracing/test_tracing.py says so).

Spans leave through a ``BatchSpanProcessor`` (its ``OTEL_BSP_*`` variables), sampled by the
SDK's ``OTEL_TRACES_SAMPLER`` (default: parent-based, always on), exported over OTLP/HTTP
(protobuf) to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
``/v1/traces``, or printed (``console``).
"""

from __future__ import annotations

import os

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter


def build_provider(service_name: str, exporters: list[str]) -> TracerProvider:
    """``service_name`` is the default of ``OTEL_SERVICE_NAME``, which wins when set (the
    resource also takes ``OTEL_RESOURCE_ATTRIBUTES``). Raises ValueError for an exporter toolq
    does not build."""
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    # shutdown_on_exit: the provider flushes its batch at interpreter exit, so a process that
    # ends normally (SIGTERM included) loses no span; setup.shutdown_tracing flushes sooner.
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=True)
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def _exporter(name: str) -> SpanExporter:
    if name == "otlp":
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol != "http/protobuf":
            raise ValueError(f"OTLP protocol {protocol!r} is not available; toolq exports http/protobuf")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, timeout, compression from OTEL_EXPORTER_OTLP_*
    if name == "console":
        return ConsoleSpanExporter()
    raise ValueError(f"OTEL_TRACES_EXPORTER {name!r} is not available; toolq builds 'otlp' and 'console'")
