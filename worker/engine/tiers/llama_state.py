"""A sequence's state in and out of llama.cpp: the only two calls into the context the tiers make.

Both run on the decode thread, which owns the context (worker/engine/scheduler.py). Copying out
is one ``llama_state_seq_get_data`` straight into a buffer Python owns (no second copy), a ready
one whose pages are already mapped where there is one (spare.py); what happens to the bytes next
(checksums, files, the LRU) is the writer thread's (store.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import llama_cpp


def copy_out(ctx: Any, seq_id: int, ready: Callable[[int], bytearray | None] | None = None) -> bytearray:
    """The sequence's cells, K and V (an empty buffer when llama.cpp gives nothing). ``ready(n)``
    may give a buffer of at least n bytes to copy into (then trimmed to the state's length)."""
    size = llama_cpp.llama_state_seq_get_size(ctx, seq_id)
    if size == 0:
        return bytearray()
    buf = (ready(size) if ready is not None else None) or bytearray(size)
    ptr = (ctypes.c_uint8 * size).from_buffer(buf)
    n = llama_cpp.llama_state_seq_get_data(ctx, ptr, size, seq_id)
    del ptr  # release the export, or the bytearray cannot be resized
    if len(buf) != n:  # a ready buffer is larger than the state; llama.cpp may write less than it said
        del buf[n:]
    return buf


def set_into(ctx: Any, seq_id: int, payload: bytearray) -> bool:
    """Replace the sequence's cells with a saved state; False when llama.cpp refused it (no room
    in the cache, a layout it does not read), and then the sequence holds nothing."""
    if not payload:
        return False
    ptr = (ctypes.c_uint8 * len(payload)).from_buffer(payload)
    try:
        n = llama_cpp.llama_state_seq_set_data(ctx, ptr, len(payload), seq_id)
    finally:
        del ptr
    return n == len(payload)
