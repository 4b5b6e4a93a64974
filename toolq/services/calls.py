"""What travels between a caller and a tool service: the call on the tool's stream, and the
outcome posted back. Both sides read and write them only through this module.

Delivery is at-least-once with the call id as the idempotency key: a call whose instance died is
claimed by another after a lease and may run again, but only the first result posted for a call
id is accepted (store/lua/service_result.lua), and a caller that sends a call id again gets that
result back instead of a second run (store/lua/service_call.lua).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from toolq.tools import ToolOutcome

__all__ = ["MAX_RESULT_CHARS", "RESULT_TTL_MS", "ServiceCall", "decode_outcome", "encode_outcome"]

# A result is untrusted text that goes into the model's context: past this it is cut, and the
# model is told so. 64 Ki characters is far more than a small model's context holds anyway.
MAX_RESULT_CHARS = 64 * 1024
RESULT_TTL_MS = 3600 * 1000  # how long an accepted result answers a call id sent again
_TRACE = ("traceparent", "tracestate")  # optional fields of a call (store/lua/service_call.lua)


@dataclass(frozen=True)
class ServiceCall:
    """One call as an instance was handed it."""

    entry_id: str  # its stream entry; the entry id's ms part is Redis's clock when it was sent
    call_id: str
    arguments: dict[str, Any]
    timeout_ms: int
    # the caller's W3C trace context (toolq/tracing/carrier.py), when the caller traces
    trace: dict[str, str] = field(default_factory=dict)

    @property
    def deadline_ms(self) -> int:
        """When the caller stops waiting, on Redis's clock."""
        return int(self.entry_id.split("-", 1)[0]) + self.timeout_ms

    @classmethod
    def from_entry(cls, entry_id: bytes | str, fields: dict[bytes, bytes]) -> ServiceCall | None:
        """None for an entry that is not a well-formed call (it is dropped, not run)."""
        eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        try:
            arguments = json.loads(fields[b"arguments"])
            trace = {k: fields[k.encode()].decode() for k in _TRACE if k.encode() in fields}
            call = cls(eid, fields[b"call_id"].decode(), arguments, int(fields[b"timeout_ms"]), trace)
            call.deadline_ms  # noqa: B018  # a malformed entry id raises here, not later
        except (KeyError, ValueError, TypeError, UnicodeDecodeError):
            return None
        return call if isinstance(arguments, dict) else None


def encode_outcome(outcome: ToolOutcome) -> str:
    return json.dumps(
        {"ok": outcome.ok, "content": outcome.content, "duration_ms": round(outcome.duration_ms, 3)},
        ensure_ascii=False,
    )


def decode_outcome(tool: str, payload: bytes | str, duration_ms: float) -> ToolOutcome:
    """The posted outcome as the caller's ToolOutcome (``duration_ms``: what the caller waited).
    A payload that is not an outcome, or a content that is too long, is the service's fault and
    reads so to the model."""
    try:
        d = json.loads(payload)
        ok, content = d["ok"], d["content"]
        if not isinstance(ok, bool) or not isinstance(content, str):
            raise TypeError("ok must be a bool and content a string")
    except (ValueError, TypeError, KeyError) as e:
        text = f"tool service {tool!r} sent a malformed result ({type(e).__name__})"
        return ToolOutcome(ok=False, content=text, error=text, duration_ms=duration_ms)
    if len(content) > MAX_RESULT_CHARS:
        content = content[:MAX_RESULT_CHARS] + f"\n[cut: the result was {len(content)} characters]"
    return ToolOutcome(ok=ok, content=content, error=None if ok else content, duration_ms=duration_ms)
