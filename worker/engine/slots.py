"""Slots: the sequences of the one llama.cpp context, and where a new prompt should go.

Each slot is one llama.cpp sequence id and remembers which tokens its cache cells hold, from
position 0 on. A prompt goes to a free slot, chosen so that as little of it as possible is
evaluated again and as little of the other conversations' caches as possible is thrown away:

- a slot whose cache holds a longer prefix of the prompt than any other slot is this
  conversation's own (the next round of a job): the prompt goes back there;
- otherwise the prompt takes the least recently used free slot, and the longest prefix any slot
  holds (busy or not: the system prompt and tool definitions every job with the same tools
  shares) is copied into it with the memory API instead of being evaluated again.

Pure bookkeeping, no llama.cpp: the scheduler (worker/engine/scheduler.py) applies a Placement
to the context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # the cached tokens, positions 0 .. len-1
    busy: bool = False
    last_used: int = 0  # a counter value: higher is more recent
    unsaved: bool = False  # a generation ended here and its state is not in the tiers yet
    tenant: str = ""  # whose conversation its cells hold


@dataclass(frozen=True)
class Placement:
    slot: Slot
    keep: int  # prompt tokens already in the slot's cache (after the copy, when there is one)
    copy_from: Slot | None = None  # copy positions [0, keep) from this slot first


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def place(
    slots: Sequence[Slot], prompt: Sequence[int], spare: Callable[[Slot], bool] | None = None
) -> Placement | None:
    """Where ``prompt`` should run, or None when every slot is busy. ``spare``: the slots whose
    cells another free slot should be taken before (a tenant below its share keeps its prefix
    warm, worker/engine/fairness.py); the least recently used among the rest goes first.

    ``keep`` never covers the whole prompt: the last prompt token is always evaluated, because
    sampling needs its logits.
    """
    free = [s for s in slots if not s.busy]
    if not free:
        return None
    shared = {s.seq_id: common_prefix(s.tokens, prompt) for s in slots}
    longest = max(shared.values())
    limit = max(len(prompt) - 1, 0)
    holders = [s for s in slots if shared[s.seq_id] == longest]
    own = next((s for s in free if shared[s.seq_id] == longest), None)
    if own is not None and longest > 0 and len(holders) == 1:
        return Placement(own, min(longest, limit))
    target = min(free, key=lambda s: (spare is not None and spare(s), s.last_used))
    if shared[target.seq_id] == longest or longest == 0:
        return Placement(target, min(shared[target.seq_id], limit))
    donor = next(s for s in holders if s is not target)
    return Placement(target, min(longest, limit), copy_from=donor)
