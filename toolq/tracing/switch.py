"""Whether this process traces, and its tracer.

Off (the default) nothing of the SDK is imported or built, and every hook in the hot paths asks
``on()`` first: a module global read. ``configure_tracing`` (toolq/tracing/setup.py) turns it on.
"""

from __future__ import annotations

from opentelemetry import trace

SCOPE = "toolq"  # the instrumentation scope of every span toolq makes

_on = False


def on() -> bool:
    return _on


def turn_on() -> None:
    global _on
    _on = True


def turn_off() -> None:
    global _on
    _on = False


def tracer() -> trace.Tracer:
    """The API tracer: the SDK's once a provider is installed, a no-op one before."""
    return trace.get_tracer(SCOPE)
