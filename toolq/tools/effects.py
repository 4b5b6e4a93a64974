"""The effect key of a tool call, and the call a running tool can ask about.

A call's effect key names the effect the model asked for, so that every attempt that runs the
call (a resumed job on another worker, a redelivered tool-service call) uses the same key, and an
external system can act on it once. It is derived from the job and the call as the model made it:
the call's id is written into the checkpoint before the call runs (worker/conversation/steps.py),
so a resumed attempt reads the same id, name and arguments, and derives the same key.

A tool reads the key with ``current_call()`` (set for the time of the call by
``toolq/tools/execution.py``), and may journal its effect with ``current_call().once(fn)``
(toolq/tools/journal.py)."""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from store.journal import Journal

__all__ = ["KEY_PREFIX", "CallContext", "NoCallError", "current_call", "effect_key"]

KEY_PREFIX = "fx_"
T = TypeVar("T")


def effect_key(job_id: str, call_id: str, name: str, arguments: Any) -> str:
    """``fx_`` and 32 hex digits: the same for the same job and call, on every attempt."""
    canonical = json.dumps(
        [job_id, call_id, name, arguments], sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:32]


class NoCallError(RuntimeError):
    """Asked for the current call outside a tool call."""


@dataclass(frozen=True)
class CallContext:
    """The call a tool is running for."""

    key: str  # the effect key
    tool: str
    job_id: str | None = None  # None: a tool service's call (it knows only the key)
    timeout_s: float | None = None  # the call's time limit
    journal: Journal | None = None  # None: this process journals nothing (no Redis at hand)

    @overload
    async def once(self, fn: Callable[[], Awaitable[T]]) -> T: ...
    @overload
    async def once(self, fn: Callable[[], T]) -> T: ...
    async def once(self, fn: Callable[[], Any]) -> Any:
        """``fn()``'s result, acting at most once per key while the journal holds its record:
        a second run under the same key returns the recorded result without calling ``fn``
        (limits: toolq/tools/journal.py)."""
        if self.journal is None:
            raise NoCallError(f"tool {self.tool!r}: no effect journal here (the process has no Redis)")
        return await self.journal.once(self.key, fn, hold_s=self.timeout_s)


_CURRENT: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar("toolq_current_call", default=None)


def current_call() -> CallContext:
    """The call the running tool serves; raises NoCallError outside a call."""
    found = _CURRENT.get()
    if found is None:
        raise NoCallError("no tool call is running in this context")
    return found


def set_current(ctx: CallContext | None) -> contextvars.Token[CallContext | None]:
    """Set before the tool's task or thread is made: both copy the context they start in."""
    return _CURRENT.set(ctx)


def reset_current(token: contextvars.Token[CallContext | None]) -> None:
    _CURRENT.reset(token)
