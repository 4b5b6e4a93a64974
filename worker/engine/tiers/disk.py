"""The disk tier: saved states as files in one folder, bounded in bytes, oldest use out first.

A file is written under a temporary name and renamed, so a reader never sees half a file under a
real name; a crash mid-write leaves only a ``.tmp`` file, which the next start deletes. At start
every file's header is read (not its payload) and checked (stateformat.py); one that fails is
deleted. The payload's checksum is checked when it is loaded, and a file that fails then is
deleted too. Last use is the file's modification time, touched on each hit, so the order of
eviction survives a restart.

Not thread-safe on its own: the store (store.py) calls it from its writer thread, and from the
loading thread under its lock.
"""

from __future__ import annotations

import fcntl
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import structlog

from worker.engine.tiers.identity import Identity
from worker.engine.tiers.stateformat import Refused, checksum, encode_header, read_header, read_payload

log = structlog.get_logger("worker.engine.tiers")

SUFFIX = ".tqkv"


@dataclass(frozen=True)
class DiskEntry:
    tokens: list[int]
    size: int  # the file's bytes


class DiskTier:
    def __init__(self, folder: Path, limit_bytes: int, identity: Identity):
        self.folder = Path(folder)
        self.limit = limit_bytes
        self.identity = identity
        self.bytes = 0
        self.refused = 0  # files refused and deleted since start
        self._items: OrderedDict[str, DiskEntry] = OrderedDict()  # oldest use first
        self._lock_file: BinaryIO | None = None

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing drops the flock
            self._lock_file = None

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def scan(self) -> dict[str, DiskEntry]:
        """Read every file's header; delete what is refused or left half-written. The entries kept."""
        self.folder.mkdir(parents=True, exist_ok=True)
        # one worker per folder: two would delete each other's half-written files and together
        # hold twice the limit. The lock is released when the process ends, however it ends.
        lock = open(self.folder / ".lock", "a+b")  # held for the process's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise OSError(f"{self.folder} is in use by another worker (each worker needs its own folder)") from None
        self._lock_file = lock
        found: list[tuple[float, str, DiskEntry]] = []
        for p in self.folder.iterdir():
            if p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
                continue
            if not p.name.endswith(SUFFIX):
                continue
            try:
                st = p.stat()
                with open(p, "rb") as f:
                    header = read_header(f, self.identity, st.st_size)
            except (Refused, OSError) as e:
                self._refuse(p, e)
                continue
            found.append((st.st_mtime, p.name[: -len(SUFFIX)], DiskEntry(header.tokens, st.st_size)))
        for _, key, entry in sorted(found, key=lambda t: t[0]):
            self._items[key] = entry
            self.bytes += entry.size
        self._evict()
        return dict(self._items)

    def write(self, key: str, tokens: list[int], payload: bytearray) -> list[str]:
        """Write a state's file; the keys dropped to stay within the limit (``key`` itself when it
        alone is larger than the limit or the write failed)."""
        self.drop(key)
        header = encode_header(self.identity, tokens, len(payload), checksum(tokens, payload))
        size = len(header) + len(payload)
        if size > self.limit:
            return [key]
        # make room first, so the folder never holds more than the limit, even for a moment
        dropped = self._evict(room=size)
        path = self.path(key)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(payload)
            os.replace(tmp, path)
        except OSError as e:
            log.warning("state file not written", path=str(path), error=repr(e))
            tmp.unlink(missing_ok=True)
            return [*dropped, key]
        self._items[key] = DiskEntry(list(tokens), size)
        self.bytes += size
        return dropped

    def read(self, key: str) -> bytearray | None:
        """A state's payload, every check passed; None (and the file deleted) when it fails one."""
        entry = self._items.get(key)
        if entry is None:
            return None
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                header = read_header(f, self.identity, os.fstat(f.fileno()).st_size)
                if header.tokens != entry.tokens:
                    raise Refused("tokens differ from the ones indexed")
                payload = read_payload(f, header)
            os.utime(path)
        except (Refused, OSError) as e:
            self._refuse(path, e)
            self._forget(key)
            return None
        self._items.move_to_end(key)
        return payload

    def drop(self, key: str) -> None:
        if key in self._items:
            self._forget(key)
            self.path(key).unlink(missing_ok=True)

    def _forget(self, key: str) -> None:
        entry = self._items.pop(key, None)
        if entry is not None:
            self.bytes -= entry.size

    def _evict(self, room: int = 0) -> list[str]:
        dropped = []
        while self._items and self.bytes + room > self.limit:
            key = next(iter(self._items))
            self.drop(key)
            dropped.append(key)
        return dropped

    def _refuse(self, path: Path, why: Exception) -> None:
        self.refused += 1
        log.warning("state file refused and deleted", path=str(path), reason=str(why))
        path.unlink(missing_ok=True)
