"""Reuse a slot's cache where it holds the prompt's text in other tokens.

The next round of a conversation renders the model's own reply again, through the chat template.
The text is the same, but the tokens often are not: a grammar samples ``{`` then ``"name`` where
the tokenizer makes ``{"`` then ``name``. Token by token, the slot's prefix then ends at the first
such spot, and everything after it (the call, the tool result, the next prompt) is evaluated
again. Matched on text instead, the slot's tokens up to the last point where both spellings reach
the same text at a token boundary stand for that part of the prompt: the prompt is rewritten to
use them, and the shared tokens are reused as they are. The model then reads its own reply in the
tokens it wrote it with.

Special tokens (``<|im_end|>`` and the like) match only themselves, never their text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from worker.engine.slots import Slot, common_prefix


def aligned(cached: Sequence[int], prompt: Sequence[int], start: int, spell: Callable[[int], bytes]) -> tuple[int, int]:
    """From token ``start`` (where both agree), the furthest (i, j) with ``cached[:i]`` and
    ``prompt[:j]`` spelling the same bytes; (start, start) when the next tokens already differ."""
    best = (start, start)
    i = j = start
    a = bytearray()  # bytes of cached[start:i]
    b = bytearray()  # bytes of prompt[start:j]
    while True:
        if len(a) == len(b):
            if i > start and a == b:
                best = (i, j)
            if i >= len(cached) or j >= len(prompt):
                return best
            a += spell(cached[i])
            b += spell(prompt[j])
            i, j = i + 1, j + 1
        elif len(a) < len(b):
            if i >= len(cached):
                return best
            a += spell(cached[i])
            i += 1
        else:
            if j >= len(prompt):
                return best
            b += spell(prompt[j])
            j += 1
        n = min(len(a), len(b))
        if a[:n] != b[:n]:
            return best


def respell(slots: Sequence[Slot], prompt: list[int], spell: Callable[[int], bytes], *, room: int) -> list[int]:
    """``prompt``, with its longest text-equal prefix taken from a slot's tokens where that lets
    more of it be reused; at most ``room`` tokens longer than ``prompt``."""
    starts = [common_prefix(slot.tokens, prompt) for slot in slots]
    # (tokens reused, slot, prompt tokens they replace): a rewrite must beat every plain prefix
    best: tuple[int, Slot | None, int] = (max(starts, default=0), None, 0)
    for slot, start in zip(slots, starts, strict=True):
        i, j = aligned(slot.tokens, prompt, start, spell)
        if i > start and i > best[0] and i - j <= room:
            best = (i, slot, j)
    reused, donor, replaced = best
    if donor is None:
        return prompt
    return donor.tokens[:reused] + prompt[replaced:]
