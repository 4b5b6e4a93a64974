"""Token blocks and their chained hashes: the keys that find a prompt's longest saved prefix.

A prompt is cut into blocks of ``block`` tokens (256 by default). Block i's hash is the hash of
block i-1's hash and block i's tokens, seeded by the model's identity, so one hash names a whole
prefix, not a block alone: two prompts share block i's hash exactly when their first (i+1)*block
tokens agree. Finding the longest saved prefix is then a walk over the prompt's blocks, one
dictionary look-up each, stopping at the first unknown one.

Why 256: a conversation's prefix changes at its end (the next message), so what is saved is one
state per conversation, and a block's size only bounds how far from a state's end a look-up can
still land. The exact shared length is then found by comparing the tokens themselves
(``store.py``), so the block size costs no reuse; it sets the index's size (a 4,096-token state
has 16 entries) and the shortest state worth keeping (one block: restoring fewer tokens saves
less than a prefill step).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

DEFAULT_BLOCK = 256


def block_hashes(seed: bytes, tokens: Sequence[int], block: int) -> list[bytes]:
    """The chained hash of each whole block of ``tokens`` (a partial last block has none)."""
    out: list[bytes] = []
    prev = seed
    data = array("i", tokens).tobytes()
    step = block * 4
    for i in range(len(tokens) // block):
        prev = hashlib.blake2b(prev + data[i * step : (i + 1) * step], digest_size=16).digest()
        out.append(prev)
    return out
