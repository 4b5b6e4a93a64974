"""A key's digest: how the gateway holds and compares API and operator keys (gateway/auth.py) and
remembers which key proved itself from which address (gateway/wrong_keys.py), never the key."""

from __future__ import annotations

import hashlib


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()
