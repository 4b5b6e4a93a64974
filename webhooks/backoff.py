"""When to try a failed delivery again: exponential backoff with jitter, capped, and the
receiver's Retry-After honoured (Standard Webhooks: "Deliverability and reliability")."""

from __future__ import annotations

import random


def retry_delay_s(
    attempt: int,
    *,
    first_s: float,
    max_s: float,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """The delay before attempt ``attempt + 1``, after attempt ``attempt`` (1-based) failed.

    The base doubles from ``first_s`` up to ``max_s``; the delay is drawn between half the base
    and the base ("equal jitter"), so senders that failed together do not retry together, and no
    retry comes much sooner than the schedule says. A receiver's Retry-After is a floor.
    """
    base = min(max_s, first_s * 2 ** max(attempt - 1, 0))
    delay = base / 2 + (rng or random).random() * base / 2
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, max_s))
    return delay
