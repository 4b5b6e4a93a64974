"""Running one validated call with a time limit, and turning whatever happened into a ToolOutcome.

Nothing here raises except asyncio.CancelledError, so the job can be cancelled while a tool runs:
a tool that fails, hangs or returns something that is not JSON becomes a failed outcome whose text
the model reads.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from typing import Any

import structlog

from toolq.tools.effects import CallContext, reset_current, set_current
from toolq.tools.function import Tool
from toolq.tools.results import ToolOutcome, render_result
from toolq.tools.threads import ToolThreads

__all__ = ["run_call"]

log = structlog.get_logger("toolq.tools")  # one logger name for the whole tool package


class _TimedOut(Exception):
    pass


async def run_call(
    found: Tool, kwargs: dict[str, Any], limit: float, threads: ToolThreads, context: CallContext | None = None
) -> ToolOutcome:
    """``context``: what ``toolq.tools.current_call()`` returns inside the tool (its effect key)."""
    started = time.perf_counter()

    def outcome(ok: bool, content: str) -> ToolOutcome:
        elapsed = (time.perf_counter() - started) * 1000.0
        return ToolOutcome(ok=ok, content=content, error=None if ok else content, duration_ms=elapsed)

    name = found.name
    try:
        ok, value = await _run_with_timeout(found, kwargs, limit, threads, context)
    except _TimedOut:
        result = outcome(False, f"tool {name!r} timed out after {limit:g} s")
        log.warning("tool_timeout", tool=name, timeout_s=limit)
        return result
    if not ok:
        # The outcome first: rendering a traceback must not count as the tool's time.
        result = outcome(False, f"tool {name!r} failed: {type(value).__name__}: {value}")
        log.warning("tool_failed", tool=name, error=result.error, where=_raised_at(value))
        return result
    try:
        return outcome(True, render_result(value))
    except (TypeError, ValueError) as exc:  # e.g. a circular structure
        return outcome(False, f"tool {name!r} returned a result that is not JSON: {exc}")


async def _run_with_timeout(
    found: Tool, kwargs: dict[str, Any], limit: float, threads: ToolThreads, context: CallContext | None
) -> tuple[bool, Any]:
    # asyncio.wait, not wait_for: wait_for waits for the cancelled tool to finish, and an
    # async tool that swallows cancellation would then hang the job past its timeout.
    # The task copies the context it is made in (and ToolThreads carries it into a thread), so
    # the call is current in the tool alone.
    token = set_current(context)
    try:
        task = asyncio.ensure_future(_invoke(found, kwargs, threads))
    finally:
        reset_current(token)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()  # an async tool stops; a sync tool's thread cannot be stopped, it is abandoned
        raise _TimedOut
    return task.result()


async def _invoke(found: Tool, kwargs: dict[str, Any], threads: ToolThreads) -> tuple[bool, Any]:
    """(True, result) or (False, exception). Catching here keeps a TimeoutError raised by the
    tool itself apart from our own timeout."""
    try:
        if found.is_async:
            return True, await found.fn(**kwargs)
        return True, await threads.run(found.name, found.fn, kwargs)
    except Exception as exc:  # CancelledError is a BaseException: it passes through
        return False, exc


def _raised_at(exc: BaseException) -> str:
    """The innermost frame, as ``file:line in func``. Not the whole traceback: a failing tool is
    an ordinary event (the model passed a bad value), and rendering tracebacks is slow and noisy."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"
