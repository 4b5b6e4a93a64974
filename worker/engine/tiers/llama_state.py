"""A sequence's state in and out of llama.cpp: the only calls into the context the tiers make.

All run on the decode thread, which owns the context (worker/engine/scheduler.py). A state is
copied out a range of positions at a time (piecewise.py says why): ``llama_memory_seq_cp`` of the
range to a spare sequence id adds that id to the same cells (one unified KV cache: no data is
copied), ``llama_state_seq_get_data`` of the spare id writes those cells alone, straight into a
buffer Python owns, and ``llama_memory_seq_rm`` takes the id off again. What happens to the bytes
next (checksums, files, the LRU) is the writer thread's (store.py).

A payload is its pieces one after another, each a u64 (little-endian) length, then the bytes
llama.cpp wrote for it. Restoring sets the first piece into the sequence and each further one
into the spare id, whose cells are then added to the sequence: ``llama_state_seq_set_data``
replaces the whole of its destination, so pieces cannot be set into one sequence directly.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import llama_cpp

_LEN = struct.Struct("<Q")


def state_size(ctx: Any, seq_id: int) -> int:
    """The bytes of the sequence's whole state, as one piece (0: it holds nothing)."""
    return int(llama_cpp.llama_state_seq_get_size(ctx, seq_id))


def copy_range(ctx: Any, seq_id: int, spare_id: int, p0: int, p1: int, buf: bytearray, at: int) -> int:
    """Append positions [p0, p1) of the sequence to ``buf`` at ``at`` as one framed piece (the
    buffer grows when it is short); the offset after it."""
    mem = llama_cpp.llama_get_memory(ctx)
    llama_cpp.llama_memory_seq_rm(mem, spare_id, -1, -1)
    llama_cpp.llama_memory_seq_cp(mem, seq_id, spare_id, p0, p1)
    try:
        size = state_size(ctx, spare_id)
        end = at + _LEN.size + size
        if len(buf) < end:
            buf.extend(bytes(end - len(buf)))
        ptr = (ctypes.c_uint8 * size).from_buffer(buf, at + _LEN.size)
        n = llama_cpp.llama_state_seq_get_data(ctx, ptr, size, spare_id)
        del ptr  # release the export, or the bytearray cannot be resized
    finally:
        llama_cpp.llama_memory_seq_rm(mem, spare_id, -1, -1)
    _LEN.pack_into(buf, at, n)
    return at + _LEN.size + n


def frames(payload: bytearray) -> list[tuple[int, int]]:
    """(offset, length) of each piece's llama.cpp bytes; ValueError when the framing is broken."""
    out = []
    at = 0
    while at < len(payload):
        if at + _LEN.size > len(payload):
            raise ValueError("a piece's length is cut off")
        (n,) = _LEN.unpack_from(payload, at)
        at += _LEN.size
        if n == 0 or at + n > len(payload):
            raise ValueError("a piece runs past the payload")
        out.append((at, n))
        at += n
    return out


def set_piece(ctx: Any, seq_id: int, spare_id: int, payload: bytearray, span: tuple[int, int], first: bool) -> bool:
    """Set one piece of a saved state (``span``: its offset and length, ``frames``) into the
    sequence: the first replaces what it held, a further one joins it through the spare id.
    False when llama.cpp refused it (no room in the cache, a layout it does not read)."""
    at, n = span
    target = seq_id if first else spare_id
    ptr = (ctypes.c_uint8 * n).from_buffer(payload, at)
    try:
        ok = llama_cpp.llama_state_seq_set_data(ctx, ptr, n, target) == n
    finally:
        del ptr
    if not first:
        mem = llama_cpp.llama_get_memory(ctx)
        if ok:
            llama_cpp.llama_memory_seq_cp(mem, spare_id, seq_id, -1, -1)
        llama_cpp.llama_memory_seq_rm(mem, spare_id, -1, -1)
    return ok


def clear(ctx: Any, seq_id: int) -> None:
    """Drop every cell the sequence holds (a restore that failed or was given up half way)."""
    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), seq_id, -1, -1)
