"""The gateway's loop stalls during a spell, from its /metrics (gateway/loop_watch.py): the
histogram's buckets read before and after, and the bucket of the longest stall between them."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

METRIC = "toolq_gateway_loop_lag_seconds_bucket"


async def lag_buckets(http: httpx.AsyncClient, headers: dict[str, str] | None = None) -> dict[float, float]:
    """Upper bound (s) -> the stalls up to it so far (Prometheus' cumulative buckets)."""
    text = (await http.get("/metrics", headers=headers or {})).text
    out = {}
    for line in text.splitlines():
        if line.startswith(METRIC + "{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


@dataclass(frozen=True)
class Stalls:
    """The timer wake-ups between two reads, and the bucket (low, high] s of the longest stall."""

    count: int
    low_s: float
    high_s: float

    @property
    def longest(self) -> str:
        if self.high_s == float("inf"):
            return f"over {self.low_s * 1000:.0f} ms"
        return f"{self.low_s * 1000:.0f} to {self.high_s * 1000:.0f} ms"

    @property
    def longest_ms(self) -> int:
        """The longest stall's bucket's upper bound, in ms: the figure a bound is held against."""
        return 10**9 if self.high_s == float("inf") else round(self.high_s * 1000)


def stalls(before: dict[float, float], after: dict[float, float]) -> Stalls:
    bounds = sorted(after)
    low, high, below = 0.0, bounds[0], 0.0
    for i, b in enumerate(bounds):
        grew = after[b] - before.get(b, 0.0)
        if grew > below:  # a wake-up this late landed in (bounds[i-1], b]
            low, high = (bounds[i - 1] if i else 0.0), b
        below = grew
    return Stalls(int(after[bounds[-1]] - before.get(bounds[-1], 0.0)), low, high)
