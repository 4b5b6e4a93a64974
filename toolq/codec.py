"""arq payload (de)serialization: msgpack, never pickle.

Job arguments are plain strings and ints (job id, attempt), so msgpack round-trips them exactly
and a worker never unpickles bytes that someone put in Redis.
"""

from __future__ import annotations

from typing import Any

import msgpack


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, default=str)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
