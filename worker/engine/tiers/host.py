"""The host-memory tier: saved states' payloads in RAM, bounded in bytes, least recently used out.

A payload counts the memory it holds, not only its length: a state copied into the ready buffer
(spare.py) and trimmed to its length keeps the buffer's allocation when it is more than half of
it (CPython shrinks a bytearray in place then).

Not thread-safe on its own: the store (store.py) holds its lock around every call.
"""

from __future__ import annotations

from collections import OrderedDict


def held_bytes(payload: bytearray | bytes) -> int:
    """The memory a payload holds: its allocation for a bytearray (less the terminating byte)."""
    if isinstance(payload, bytearray):
        return max(len(payload), payload.__alloc__() - 1)
    return len(payload)


class HostTier:
    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self.bytes = 0
        self._items: OrderedDict[str, bytearray] = OrderedDict()  # oldest use first

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[str]:
        return list(self._items)

    def put(self, key: str, payload: bytearray) -> list[str]:
        """Keep ``payload``; the keys dropped to stay within the limit (``key`` itself when it
        alone is larger than the limit)."""
        self.drop(key)
        if held_bytes(payload) > self.limit:
            return [key]
        self._items[key] = payload
        self.bytes += held_bytes(payload)
        dropped = []
        while self.bytes > self.limit:
            old, data = self._items.popitem(last=False)
            self.bytes -= held_bytes(data)
            dropped.append(old)
        return dropped

    def get(self, key: str) -> bytearray | None:
        data = self._items.get(key)
        if data is not None:
            self._items.move_to_end(key)
        return data

    def drop(self, key: str) -> None:
        data = self._items.pop(key, None)
        if data is not None:
            self.bytes -= held_bytes(data)
