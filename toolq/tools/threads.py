"""Running sync tools: one daemon thread per call, with a cap on how many may be alive at once.

Not asyncio's default executor: a hung tool there would starve everything else using it.
Not a ThreadPoolExecutor either: its workers are joined at interpreter exit, so one tool stuck
forever would stop the worker process from ever shutting down. Daemon threads are abandoned at
exit; the cap bounds how many stuck ones may pile up rather than let a misbehaving tool exhaust
the process.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_MAX_THREADS", "ToolThreads"]

DEFAULT_MAX_THREADS = 32


class ToolThreads:
    def __init__(self, max_threads: int = DEFAULT_MAX_THREADS):
        self.max_threads = max_threads
        self._running = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        return self._running

    async def run(self, name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """``fn(**kwargs)`` in a new thread; raises RuntimeError when the cap is reached."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        # Carry context variables (structlog's bound job_id, say) into the tool's thread.
        ctx = contextvars.copy_context()
        with self._lock:
            if self._running >= self.max_threads:
                raise RuntimeError(
                    f"{self._running} earlier tool calls are still running (the limit is "
                    f"{self.max_threads}); try again later"
                )
            self._running += 1

        def target() -> None:
            try:
                result, error = ctx.run(fn, **kwargs), None
            except Exception as exc:
                result, error = None, exc
            except BaseException as exc:  # SystemExit in a tool must not reach the event loop
                result, error = None, RuntimeError(f"{type(exc).__name__} raised in the tool")
            finally:
                with self._lock:
                    self._running -= 1
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:
                pass  # the loop closed while the tool ran; nobody is waiting any more

        threading.Thread(target=target, name=f"toolq-tool-{name}", daemon=True).start()
        return await future


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # timed out or cancelled meanwhile: the result has nowhere to go
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
