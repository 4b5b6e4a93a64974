"""Every grammar is built off the worker's event loop, within a size and a time budget.

What the gateway admits is bounded already (toolq/schema_bounds.py), but a request's tools
together, or limits set higher than the worker's, can still ask for a grammar that would take the
worker's memory or block its loop (DESIGN.md, "Facts for hostile input"). So:

- the converter counts the grammar text it writes and refuses, before it writes it, a repetition
  that would pass ``max_bytes`` (worker/grammar/schema_grammar.py); the whole grammar is measured
  again once rendered (worker/grammar/builder.py);
- ``build`` runs the building in a thread, so the loop's heartbeat and the other slots go on, and
  gives up waiting after ``timeout_s``.

Either way the job ends with ``grammar_too_large`` (worker/endings.py) and the worker goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from worker.grammar.errors import GrammarTooLarge

__all__ = ["GrammarBudget", "GrammarTooLarge", "build", "current_budget"]

T = TypeVar("T")


@dataclass(frozen=True)
class GrammarBudget:
    # Measured on this project's 2-core CPU: one tool of 8 strings of minLength 1,000 (the
    # protocol's default bounds) is 43 KB of grammar, built in 0.2 s and checked in 0.04 s; 20 such
    # tools are 854 KB, 2.9 s and 1.3 s, and llama.cpp parses a grammar again in the decode
    # thread, where every slot waits on it. 256 KiB holds 5 such tools.
    max_bytes: int = 256 * 1024
    timeout_s: float = 10.0


_DEFAULT = GrammarBudget()
_BUDGET: contextvars.ContextVar[GrammarBudget | None] = contextvars.ContextVar("grammar_budget", default=None)


def current_budget() -> GrammarBudget:
    """The budget of the grammar being built (the default outside ``build``)."""
    return _BUDGET.get() or _DEFAULT


async def build(make: Callable[[], T], budget: GrammarBudget, what: str = "the grammar") -> T:
    """``make()`` in a thread under ``budget``; GrammarTooLarge when it passes it."""

    def run() -> T:
        _BUDGET.set(budget)  # the thread runs in a copy of the caller's context
        return make()

    task = asyncio.ensure_future(asyncio.to_thread(run))
    try:
        # shield: a timeout stops the wait, not the thread (it cannot be stopped, and the size
        # budget ends it soon); the thread's result is then dropped
        return await asyncio.wait_for(asyncio.shield(task), budget.timeout_s)
    except asyncio.TimeoutError:
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise GrammarTooLarge(
            f"building {what} took longer than {budget.timeout_s:g} s (TOOLQ_GRAMMAR_BUILD_TIMEOUT_S)"
        ) from None
