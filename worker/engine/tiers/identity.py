"""What a saved state is valid for: one model file, one llama.cpp build, one cache layout.

A sequence's state is the raw K and V tensors of its cells. They mean something only to the same
weights, read by the same llama.cpp code, in the same layout (flash attention stores V untransposed,
the cache's element types). The identity digests all of that; it seeds every block hash
(``blocks.py``) and is written into every file header (``stateformat.py``), so a state from
another model or build is never found, and a file from one is refused.

The model file is identified by its size and the bytes at both ends (the GGUF header with its
metadata, and the last tensors) rather than a hash of the whole file: reading gigabytes at every
start-up would cost more than the cache saves, and a changed file of the same size that also
keeps both ends is not a case that occurs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

_EDGE = 8 << 20  # bytes read at each end of the model file


@dataclass(frozen=True)
class Identity:
    digest: bytes  # 32 bytes
    build: str  # the llama.cpp build, readable (it is in the digest too)

    @property
    def short(self) -> str:
        return self.digest.hex()[:16]


def model_identity(model_path: Path, *, build: str, layout: str) -> Identity:
    """``layout``: what of the context's settings changes the state's bytes (flash attention, types)."""
    h = hashlib.sha256()
    size = Path(model_path).stat().st_size
    h.update(b"toolq-kv-identity\0")
    h.update(size.to_bytes(8, "little"))
    with open(model_path, "rb") as f:
        h.update(f.read(_EDGE))
        if size > 2 * _EDGE:
            f.seek(size - _EDGE)
            h.update(f.read(_EDGE))
    h.update(b"\0build=" + build.encode())
    h.update(b"\0layout=" + layout.encode())
    return Identity(h.digest(), build)
