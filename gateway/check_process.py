"""A process of the gateway's own for a request's costly checks, so that no tenant's request can
hold the event loop's GIL.

A thread beside the loop was not enough. The checks are mostly pure Python (jsonschema's
metaschema walk, RE2 compiles, the depth scan's C steps), and they share the GIL with the loop.
On a loaded host, the thread that holds it can be descheduled, and the loop then waits for it.
In the hostile soak (bench/bench_hostile_tenant.py), ``/healthz`` waited 250 to 330 ms that way
behind 1 MiB bodies, whatever the thread's priority. A process has a GIL of its own. It also runs
at a lower CPU priority (``NICE``), so a tenant's second of checks yields the host's cores to the
loop and to a worker beside the gateway. With the checks in a thread at normal priority, tenant
B's jobs beside tenant A's slow-build requests ran 3.4 to 4.3x their quiet time
(tests/e2e/test_slow_builds.py).

What crosses to the process is small or flat: a body's bytes, or a request's dict and the model
to check it with. What comes back is a verdict, not a model: the loop builds the model itself,
with the checks already done (toolq/wire/protocol.py, ``STORED``). The process reads the same
``TOOLQ_`` settings as the gateway: they are sent with each call, so a bound changed after the
process started still applies.

A batch's input file is read in a second such process (``in_file_process``): its tens of
thousands of lines take seconds to check, and in the checks' process they would hold up every
other tenant's request checks behind them; in a thread they held ``/healthz`` up to 250 ms
(bench/bench_batch_create.py).
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import structlog

__all__ = ["NICE", "in_check_process", "in_file_process", "warm", "warm_files"]

T = TypeVar("T")
log = structlog.get_logger("toolq.gateway")

NICE = 19  # the checks yield the CPU to the loop and to the host's other processes (10 left B at 1.4x)


def _start(gateway_pid: int) -> None:
    os.nice(NICE)
    # a gateway killed outright (SIGKILL, OOM) cannot stop its pool: the process goes with it
    threading.Thread(target=_orphaned, args=(gateway_pid,), daemon=True, name="toolq-orphan-watch").start()


def _orphaned(gateway_pid: int) -> None:
    while os.getppid() == gateway_pid:
        time.sleep(0.5)
    os._exit(0)


def _settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("TOOLQ_")}


def _call(settings: dict[str, str], fn: Callable[..., T], *args: Any) -> T:
    for k in [k for k in os.environ if k.startswith("TOOLQ_") and k not in settings]:
        del os.environ[k]
    os.environ.update(settings)
    return fn(*args)


class _Process:
    """One process of the gateway's own, started on first use and again if it died."""

    def __init__(self, what: str):
        self.what = what
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the gateway runs threads (the loop's pool, the clients'), which fork would copy
            # in whatever state they hold
            self._pool = ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"), initializer=_start, initargs=(os.getpid(),)
            )
        return self._pool

    @property
    def started(self) -> bool:
        return self._pool is not None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), _call, _settings(), fn, *args)
        except BrokenProcessPool:
            # the process died (killed, or out of memory): one more try on a new one, so a request
            # is never lost to a neighbour's crash
            log.warning(f"{self.what} process died; starting another")
            self._pool = None
            return await loop.run_in_executor(self._executor(), _call, _settings(), fn, *args)

    async def warm(self, modules: tuple[str, ...]) -> None:
        """Start the process now and import ``modules`` there, so the first call does not wait
        for them (about a second). Once per gateway process: an app made again (tests) finds it
        started."""
        if not self.started:
            try:
                await self.run(_ready, modules)
            except Exception:  # the first call will start it again, and say what failed
                log.warning(f"{self.what} process did not start", exc_info=True)


_CHECKS = _Process("request check")
_FILES = _Process("batch file")


async def in_check_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the check process (started on first use, and again if it died). ``fn``
    and its arguments must pickle; an exception it raises comes back as itself."""
    return await _CHECKS.run(fn, *args)


async def in_file_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the batch files' process, as ``in_check_process`` runs it in its own."""
    return await _FILES.run(fn, *args)


def _ready(modules: tuple[str, ...]) -> bool:
    for name in modules:
        importlib.import_module(name)
    return True


async def warm(modules: tuple[str, ...]) -> None:
    """Start the check process and import ``modules`` there (the request models the checks read)."""
    await _CHECKS.warm(modules)


FILE_MODULES = ("gateway.openai.batches.lines",)  # what reading a batch's file imports


async def warm_files() -> None:
    """Start the batch files' process, so that a gateway's first batch does not wait for it."""
    await _FILES.warm(FILE_MODULES)
