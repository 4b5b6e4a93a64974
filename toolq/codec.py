"""arq payload (de)serialization: msgpack, never pickle.

Job arguments are plain strings and ints (job id, attempt), so msgpack round-trips them exactly
and a worker never unpickles bytes that someone put in Redis.
"""

from __future__ import annotations

from typing import Any, cast

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type hints


def pack(obj: Any) -> bytes:
    return cast(bytes, msgpack.packb(obj, use_bin_type=True, default=str))  # packb always returns bytes


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
