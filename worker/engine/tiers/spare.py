"""One buffer, its pages already in memory, ready for the next state copied out of llama.cpp.

Copying a sequence out runs on the decode thread (llama_state.py), so its time is a stall of
every other slot's step. Much of that time is not the copy: a fresh buffer of tens of megabytes
is zeroed and faulted in page by page first. Measured here (SmolLM2-135M, 2,249 tokens, 52 MB):
about 30 ms into a fresh ``bytearray``, 8 ms into one whose pages are already mapped, where a
decode step beside it takes about 11 ms. So one buffer of the largest state a slot can hold is
kept allocated and touched; a save copies into it and trims it to the state's length (it becomes
that state's payload), and the next one is made when the engine is idle.

Why idle, on the decode thread, and not on the tiers' writer thread: CPython zeroes a new
``bytearray`` holding the GIL (about 35 ms for 94 MB here), and the decode thread needs the GIL
after every llama.cpp call, so an allocation on another thread during a save stalled the step as
much as the page faults it was meant to move away. While every slot is busy, a second save
before the engine has been idle copies into a buffer that grows a piece at a time
(piecewise.py): slower, never wrong, and spread over the steps as the copy is.

The cost is one buffer of ``size`` bytes of host memory per worker, beside the host tier, and a
trimmed state that is more than half of the buffer keeps the buffer's allocation (host.py counts
that against its limit).
"""

from __future__ import annotations

import threading

PAGE = 4096


class SpareBuffer:
    def __init__(self, size: int):
        self.size = size
        self._lock = threading.Lock()
        self._buf: bytearray | None = None

    def take(self, n: int) -> bytearray | None:
        """The ready buffer, if there is one of at least ``n`` bytes (decode thread)."""
        with self._lock:
            buf = self._buf
            if buf is None or len(buf) < n:
                return None
            self._buf = None
            return buf

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._buf is not None

    def fill(self) -> None:
        """Make the next buffer, unless one is ready (the decode thread, while idle)."""
        if self.size <= 0 or self.ready:
            return
        buf = bytearray(self.size)  # zeroed by CPython: every page is written, so mapped, here
        buf[::PAGE] = bytes(len(range(0, self.size, PAGE)))  # and surely so, whatever the allocator did
        with self._lock:
            if self._buf is None:
                self._buf = buf
