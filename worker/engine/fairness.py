"""Virtual token counters: how tenants share one engine's batch.

The Virtual Token Counter of Sheng et al. (OSDI 2024; DESIGN.md, "Facts for isolation"): each
tenant has a counter of the service it has had, where a prompt token costs 1 and a generated
token 2, divided by the tenant's weight (TOOLQ_TENANTS). Then:

- a freed slot goes to the backlogged tenant with the lowest counter (``lowest``);
- a tenant that becomes backlogged again (its first sequence in the engine after none) is lifted
  to the lowest counter among the others backlogged, so idle time is not banked as credit
  (``arrive``);
- while a tenant waits with fewer slots than its weight's share, a tenant over its share gives
  one of its sequences up at a step boundary (``gives_way``);
- in each step, a tenant whose counter is more than ``quantum`` ahead of the lowest among those
  with tokens to feed sits the step out, and its prompt chunk takes no more than its room below
  that (the lowest takes what the step allows) (``rooms``): so the service gap between two
  backlogged tenants stays within about a quantum plus one step's tokens.

Alone, a tenant is never held back (work-conserving): the limits apply only between tenants that
both have work. Pure bookkeeping: the scheduler (worker/engine/scheduler.py) asks it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

PROMPT_COST = 1.0
GENERATED_COST = 2.0
QUANTUM = 16.0  # the lead (in counter units) a tenant may take over the lowest before it gives way


class Tenanted(Protocol):
    tenant: str


T = TypeVar("T", bound=Tenanted)


class TokenCounters:
    def __init__(self, quantum: float = QUANTUM):
        self.quantum = quantum
        self.counters: dict[str, float] = {}
        self._live: dict[str, int] = {}  # tenant -> its sequences in the engine (queued or in a slot)

    def backlogged(self) -> set[str]:
        return {t for t, n in self._live.items() if n > 0}

    def arrive(self, tenant: str) -> None:
        """A sequence of ``tenant`` enters the engine; its first after none lifts its counter."""
        if self._live.get(tenant, 0) == 0:
            others = [self.counters.get(t, 0.0) for t in self.backlogged() if t != tenant]
            own = self.counters.get(tenant, 0.0)
            self.counters[tenant] = max(own, min(others)) if others else own
        self._live[tenant] = self._live.get(tenant, 0) + 1

    def leave(self, tenant: str) -> None:
        """A sequence of ``tenant`` has ended."""
        n = self._live.get(tenant, 0) - 1
        if n > 0:
            self._live[tenant] = n
        else:
            self._live.pop(tenant, None)

    def charge(self, tenant: str, weight: float, *, prompt: int = 0, generated: int = 0) -> None:
        self.counters[tenant] = self.counters.get(tenant, 0.0) + (
            prompt * PROMPT_COST + generated * GENERATED_COST
        ) / max(weight, 1e-9)

    def lowest(self, tenants: Iterable[str]) -> str | None:
        """The tenant of ``tenants`` with the lowest counter (the first named on a tie)."""
        best: str | None = None
        for t in tenants:
            if best is None or self.counters.get(t, 0.0) < self.counters.get(best, 0.0):
                best = t
        return best

    def spare(self, placing: str) -> Callable[[Tenanted], bool]:
        """Which cached prefixes ``placing``'s prompt should leave be while another free slot
        will do (worker/engine/slots.py ``place``): those of tenants that have had less service
        than it, so a flood does not push out the prefix of a tenant below its share."""
        mine = self.counters.get(placing, 0.0)
        return lambda held: held.tenant != placing and self.counters.get(held.tenant, 0.0) < mine

    def rooms(self, tenants: Mapping[str, float]) -> dict[str, float]:
        """For the tenants with tokens to feed this step (tenant -> weight): the prompt tokens
        each may take in it; 0 or less sits the step out. One tenant alone: no limit."""
        if len(tenants) <= 1:
            return {t: float("inf") for t in tenants}
        low = min(self.counters.get(t, 0.0) for t in tenants)
        return {
            t: float("inf") if c == low else (low + self.quantum - c) * w / PROMPT_COST
            for t, w in tenants.items()
            for c in [self.counters.get(t, 0.0)]
        }


def first_in_line(counters: TokenCounters | None, waiting: Sequence[T]) -> T:
    """The first waiting sequence of the tenant with the lowest counter; without counters, the
    first to arrive."""
    if counters is None:
        return waiting[0]
    tenant = counters.lowest(dict.fromkeys(s.tenant for s in waiting))
    return next(s for s in waiting if s.tenant == tenant)


def gives_way(held: Mapping[str, int], weights: Mapping[str, float], wanting: str, slots: int) -> str | None:
    """The tenant that gives a slot to ``wanting`` (a tenant with a sequence waiting and no free
    slot), or None. ``weights``: every tenant with work in the engine (a slot or a wait); each
    one's share of the slots is its part of their weights. The one furthest over its share gives,
    where that is more than one slot further than ``wanting`` is: each move then brings the
    holdings strictly closer to the shares (their squared distance falls), so a slot never moves
    back and forth between two tenants."""
    total = sum(weights.values())

    def over(t: str) -> float:
        return held.get(t, 0) - slots * weights[t] / total

    best: str | None = None
    for t, n in held.items():
        if t == wanting or n == 0 or t not in weights:
            continue
        if over(t) - over(wanting) > 1 and (best is None or over(t) > over(best)):
            best = t
    return best
