"""Grammar builds in processes of their own, so a build past its budget is ended, not abandoned.

A Python thread that is no longer awaited keeps its CPU (DESIGN.md, "Facts for isolation"), and a
build thread in the event loop's default pool also held up each job's own work there. So a
worker keeps a few build processes (worker/grammar/build_process.py, at most
``TOOLQ_GRAMMAR_BUILD_PROCESSES``, started when first needed) at a lower CPU priority. A build
takes one; past ``timeout_s``, or when its job is cancelled, that process is killed, its CPU
freed at once, and another is started when next needed.

Nothing here blocks the event loop: a process's pipes are non-blocking and read and written as
the loop finds them ready, and a task is sent only to a process that has said it is ready. The
pool belongs to the worker process, not to one event loop (a test's loops come and go; the
build processes stay).
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import functools
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import structlog

from worker.grammar.budget import GrammarBudget
from worker.grammar.build_process import HEADER
from worker.grammar.errors import GrammarBuildFailed, GrammarTooLarge

__all__ = ["BuildPool", "shared_pool"]

log = structlog.get_logger("worker.grammar")

NICE = 10  # build processes yield the CPU to the decode thread
START_TIMEOUT_S = 60.0  # importing the formats and llama.cpp's converter, on a loaded machine


class _Gone(Exception):
    """The build process closed its pipe (it died)."""


class _Process:
    """One build process and its two non-blocking pipes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker.grammar.build_process", str(NICE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._w, self._r = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        for fd in (self._w, self._r):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._buf = bytearray()

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def send(self, body: bytes) -> None:
        data = memoryview(HEADER.pack(len(body)) + body)
        while data:
            try:
                n = os.write(self._w, data)
            except BlockingIOError:
                await self._ready(writing=True)
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise _Gone from None
            data = data[n:]

    async def receive(self) -> Any:
        while True:
            if len(self._buf) >= HEADER.size:
                (n,) = HEADER.unpack_from(self._buf)
                if len(self._buf) >= HEADER.size + n:
                    frame = bytes(self._buf[HEADER.size : HEADER.size + n])
                    del self._buf[: HEADER.size + n]
                    return pickle.loads(frame)
            try:
                chunk = os.read(self._r, 1 << 20)
            except BlockingIOError:
                await self._ready(writing=False)
                continue
            if not chunk:
                raise _Gone
            self._buf += chunk

    async def _ready(self, *, writing: bool) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        fd = self._w if writing else self._r

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        (loop.add_writer if writing else loop.add_reader)(fd, wake)
        try:
            await done
        finally:
            (loop.remove_writer if writing else loop.remove_reader)(fd)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()

    def reaped(self) -> bool:
        return self.proc.poll() is not None


class BuildPool:
    def __init__(self, size: int = 2):
        self.size = max(1, size)
        self._idle: list[_Process] = []
        self._busy: set[_Process] = set()
        self._starting = 0
        self._waiters: collections.deque[asyncio.Future[_Process]] = collections.deque()
        self._dead: list[_Process] = []  # killed, not yet reaped (reaping never waits)
        self.killed = 0  # builds ended past their time or with their job
        self.runs = 0  # builds sent to a process

    # ------------------------------------------------------------------ processes

    def pids(self) -> set[int]:
        return {p.pid for p in (*self._idle, *self._busy)}

    async def _acquire(self) -> _Process:
        self._dead = [p for p in self._dead if not p.reaped()]
        if self._idle:
            return self._idle.pop()
        if len(self._busy) + self._starting < self.size:
            return await self._start()
        waiter: asyncio.Future[_Process] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter  # a process freed, or started in place of a killed one
        except asyncio.CancelledError:
            # cancelled with its job after a process was handed to it: the next build takes it
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())
            raise

    async def _start(self) -> _Process:
        self._starting += 1
        p: _Process | None = None
        try:
            p = _Process()
            ready = await asyncio.wait_for(p.receive(), START_TIMEOUT_S)
            if not (isinstance(ready, tuple) and ready[0] == "ready"):
                raise _Gone
            return p
        except (_Gone, asyncio.TimeoutError, OSError) as e:
            if p is not None:
                self._bury(p)
            raise GrammarBuildFailed(f"no grammar build process could be started ({type(e).__name__})") from None
        except BaseException:
            if p is not None:
                self._bury(p)
            raise
        finally:
            self._starting -= 1

    def _release(self, p: _Process) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(p)
                return
        self._idle.append(p)

    def _bury(self, p: _Process) -> None:
        """Kill ``p`` and, if a build waits for a process, start one for it."""
        p.kill()
        self._busy.discard(p)
        self._dead.append(p)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done() and not waiter.get_loop().is_closed():
                task = waiter.get_loop().create_task(self._start())
                task.add_done_callback(functools.partial(self._settle, waiter))
                return

    def _settle(self, waiter: asyncio.Future[_Process], task: asyncio.Task[_Process]) -> None:
        """A process started for ``waiter`` is up (or failed to start). When the waiter's build
        was cancelled meanwhile, the process goes to the next build or the idle list: killing it
        would leave builds queued behind it with no process to come, ever."""
        if task.cancelled() or task.exception() is not None:
            if not waiter.done():
                if task.cancelled():
                    waiter.cancel()
                else:
                    waiter.set_exception(task.exception())  # type: ignore[arg-type]
            return
        if waiter.done():
            self._release(task.result())
        else:
            waiter.set_result(task.result())

    async def ready(self) -> None:
        """Start the processes now (a worker's startup), so no build waits on a start."""
        while len(self._idle) + len(self._busy) + self._starting < self.size:
            self._release(await self._start())

    def close(self) -> None:
        for p in [*self._idle, *self._busy]:
            p.kill()
            p.proc.wait()
        self._idle.clear()
        self._busy.clear()

    # ------------------------------------------------------------------ a build

    async def run(self, func: Callable[..., str], args: tuple[Any, ...], budget: GrammarBudget, what: str) -> str:
        """``func(*args)`` in a build process under ``budget``: the grammar text, or
        GrammarTooLarge (past its size or time) or GrammarBuildFailed (anything else)."""
        try:
            task = pickle.dumps((func, args, budget), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise GrammarBuildFailed(f"{what} cannot be sent to a build process: {e}") from None
        p = await self._acquire()  # waiting for a free process is not the build's own time
        self._busy.add(p)
        self.runs += 1
        try:
            await p.send(task)
            kind, value = await asyncio.wait_for(p.receive(), budget.timeout_s)
        except asyncio.TimeoutError:
            self.killed += 1
            self._bury(p)
            raise GrammarTooLarge(
                f"building {what} took longer than {budget.timeout_s:g} s (TOOLQ_GRAMMAR_BUILD_TIMEOUT_S); "
                "the build was stopped"
            ) from None
        except (_Gone, OSError, EOFError, pickle.PickleError) as e:
            self._bury(p)
            raise GrammarBuildFailed(f"building {what} ended its build process ({type(e).__name__})") from None
        except BaseException:  # cancelled with its job: the build is stopped with it
            self.killed += 1
            self._bury(p)
            raise
        self._busy.discard(p)
        self._release(p)
        if kind == "ok":
            return str(value)
        if kind == "too_large":
            raise GrammarTooLarge(value)
        raise GrammarBuildFailed(f"{what} cannot be built: {value}")


_SHARED: BuildPool | None = None


def shared_pool(size: int) -> BuildPool:
    """The worker's one pool (its size the largest asked for)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = BuildPool(size)
    elif size > _SHARED.size:
        _SHARED.size = size
    return _SHARED
