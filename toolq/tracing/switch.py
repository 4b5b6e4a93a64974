"""Whether this process traces, and its tracer.

Off (the default) nothing of the SDK is imported or built, and every hook in the hot paths asks
``on()`` first: a module global read. ``configure_tracing`` (toolq/tracing/setup.py) turns it on.
"""

from __future__ import annotations

from opentelemetry import trace

SCOPE = "toolq"  # the instrumentation scope of every span toolq makes

_on = False
_tracer: trace.Tracer | None = None


def on() -> bool:
    return _on


def turn_on() -> None:
    """Once the provider is installed: the tracer is taken from it here, once (the SDK builds a
    new one on every ``get_tracer``, which cost more than a span)."""
    global _on, _tracer
    _tracer = trace.get_tracer(SCOPE)
    _on = True


def turn_off() -> None:
    global _on
    _on = False


def tracer() -> trace.Tracer:
    """The tracer of the installed provider (a no-op one while tracing is off)."""
    return _tracer if _on and _tracer is not None else trace.get_tracer(SCOPE)
