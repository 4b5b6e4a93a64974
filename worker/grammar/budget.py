"""Every grammar is built within a size and a time budget, off the worker's event loop.

What the gateway admits is bounded already (toolq/wire/schema_bounds.py), but a request's tools
together, or limits set higher than the worker's, can still ask for a grammar that would take the
worker's memory or its CPU (DESIGN.md, "Facts for hostile input"). So:

- the converter counts the grammar text it writes and refuses, before it writes it, a repetition
  that would pass ``max_bytes`` (worker/grammar/schema_grammar.py); the whole grammar is measured
  again once rendered (worker/grammar/builder.py);
- a build runs in a build process (worker/grammar/pool.py), which is killed at ``timeout_s``;
- a build that failed is remembered by its digest (worker/grammar/builds.py): the same tools are
  refused at once, with the same error.

Either way the job ends with ``grammar_too_large`` (worker/endings.py) and the worker goes on.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from worker.grammar.errors import GrammarTooLarge

__all__ = ["GrammarBudget", "GrammarTooLarge", "current_budget", "use_budget"]


@dataclass(frozen=True)
class GrammarBudget:
    # Measured on this project's 2-core CPU: one tool of 8 strings of minLength 1,000 (the
    # protocol's default bounds) is 43 KB of grammar, built in 0.2 s and checked in 0.04 s; 20 such
    # tools are 854 KB, 2.9 s and 1.3 s, and llama.cpp parses a grammar again in the decode
    # thread, where every slot waits on it. 256 KiB holds 5 such tools.
    max_bytes: int = 256 * 1024
    timeout_s: float = 10.0
    processes: int = 2  # build processes (TOOLQ_GRAMMAR_BUILD_PROCESSES)
    remembered_failures: int = 1024  # failed builds refused at once (TOOLQ_GRAMMAR_FAILURES_REMEMBERED)


_DEFAULT = GrammarBudget()
_BUDGET: contextvars.ContextVar[GrammarBudget | None] = contextvars.ContextVar("grammar_budget", default=None)


def current_budget() -> GrammarBudget:
    """The budget of the grammar being built (the default outside ``use_budget``)."""
    return _BUDGET.get() or _DEFAULT


@contextmanager
def use_budget(budget: GrammarBudget) -> Iterator[None]:
    """Build under ``budget`` (a build process sets it around each task)."""
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)
