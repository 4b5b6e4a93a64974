"""How a grammar ends a job: each failure an EngineError of its own, so worker/endings.py gives
it a precise code and the worker goes on."""

from __future__ import annotations

from worker.generation import EngineError

__all__ = ["GrammarBuildFailed", "GrammarDeadEnd", "GrammarTooLarge"]


class GrammarTooLarge(EngineError):
    """A grammar past its size or time budget, or one that could not be built; the job that asked
    for it ends with this (``grammar_too_large``)."""


class GrammarDeadEnd(EngineError):
    """A sequence's grammar allows no token where it stands (``grammar_dead_end``): only that
    sequence ends; the others in the batch go on."""


class GrammarBuildFailed(EngineError):
    """A grammar that could not be built for another reason than its budget (a schema the
    converter cannot read into a valid grammar, a build process that died): ``engine_error``."""
