"""A saved state's file: a header that says what it is valid for, then its tokens and payload.

Layout (little-endian):

    magic      8 bytes   b"TOOLQKV\\0"
    version    u16       FORMAT_VERSION
    build_len  u16       length of the llama.cpp build string that follows the fixed part
    identity   32 bytes  the model's identity digest (identity.py)
    n_tokens   u32       tokens the state holds, positions 0 .. n_tokens-1
    payload    u64       bytes of llama.cpp state after the tokens
    checksum   16 bytes  BLAKE2b-128 of the tokens' bytes and the payload
    build      build_len bytes (UTF-8)
    tokens     n_tokens x i32
    payload    payload bytes: pieces, each a u64 length and what llama_state_seq_get_data wrote
               (worker/engine/tiers/llama_state.py)

A file is refused (``Refused``) when its magic, version, identity or build is not this worker's,
when its length is not exactly what its header says (truncated, or something appended), or when
its checksum does not match: the caller deletes it. Only a file that passes every check is handed
to llama.cpp, which trusts what it reads.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from worker.engine.tiers.identity import Identity

MAGIC = b"TOOLQKV\0"
FORMAT_VERSION = 2  # 2: the payload is framed pieces (llama_state.py)
_FIXED = struct.Struct("<8sHH32sIQ16s")


class Refused(ValueError):
    """A state file that must not be loaded (and is deleted)."""


@dataclass(frozen=True)
class Header:
    build: str
    identity: bytes
    tokens: list[int]
    payload_len: int
    checksum: bytes
    payload_at: int  # offset of the payload in the file

    @property
    def file_len(self) -> int:
        return self.payload_at + self.payload_len


def checksum(tokens: Sequence[int], payload: bytes | bytearray | memoryview) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(array("i", tokens).tobytes())
    h.update(payload)
    return h.digest()


def encode_header(identity: Identity, tokens: Sequence[int], payload_len: int, digest: bytes) -> bytes:
    build = identity.build.encode()
    fixed = _FIXED.pack(MAGIC, FORMAT_VERSION, len(build), identity.digest, len(tokens), payload_len, digest)
    return fixed + build + array("i", tokens).tobytes()


def read_header(f: BinaryIO, identity: Identity, file_len: int) -> Header:
    """The header of an open file, checked against this worker's identity and the file's length."""
    raw = f.read(_FIXED.size)
    if len(raw) < _FIXED.size:
        raise Refused("truncated header")
    magic, version, build_len, ident, n_tokens, payload_len, digest = _FIXED.unpack(raw)
    if magic != MAGIC:
        raise Refused("not a toolq state file")
    if version != FORMAT_VERSION:
        raise Refused(f"format version {version}, this worker reads {FORMAT_VERSION}")
    build_raw = f.read(build_len)
    if len(build_raw) < build_len:
        raise Refused("truncated header")
    build = build_raw.decode("utf-8", "replace")
    if build != identity.build:
        raise Refused(f"saved by llama.cpp build {build!r}, this worker runs {identity.build!r}")
    if ident != identity.digest:
        raise Refused("saved for another model or cache layout")
    token_raw = f.read(4 * n_tokens)
    if len(token_raw) < 4 * n_tokens:
        raise Refused("truncated tokens")
    tokens = array("i")
    tokens.frombytes(token_raw)
    payload_at = _FIXED.size + build_len + 4 * n_tokens
    if payload_at + payload_len != file_len:
        raise Refused(f"{file_len} bytes where the header says {payload_at + payload_len}")
    return Header(build, ident, tokens.tolist(), payload_len, digest, payload_at)


def read_payload(f: BinaryIO, header: Header) -> bytearray:
    """The payload after ``read_header``, its checksum verified."""
    payload = bytearray(header.payload_len)
    view = memoryview(payload)
    got = 0
    while got < header.payload_len:
        n = cast(Any, f).readinto(view[got:])  # an open binary file, buffered
        if not n:
            raise Refused("truncated payload")
        got += n
    if checksum(header.tokens, payload) != header.checksum:
        raise Refused("checksum mismatch")
    return payload
