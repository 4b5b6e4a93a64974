"""The grammars a worker builds, remembered by digest: each built once, and each failure refused at
once.

A build runs in a build process (worker/grammar/pool.py). Its result is kept in a bounded LRU
(a tool set's grammar never changes); so is its failure (too large, too slow, not buildable), so
that a tenant who sends the same tools again is refused at once with the same error instead of
taking a build process for another ``timeout_s``. The digest covers what the grammar is built from
and the budget it was built under.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from worker.grammar.budget import GrammarBudget
from worker.grammar.errors import GrammarBuildFailed, GrammarTooLarge
from worker.grammar.pool import BuildPool, shared_pool

__all__ = ["GrammarBuilds"]

GRAMMAR_CACHE = 256  # distinct grammars kept


class GrammarBuilds:
    def __init__(
        self, budget: GrammarBudget | None = None, *, size: int = GRAMMAR_CACHE, pool: BuildPool | None = None
    ):
        self.budget = budget or GrammarBudget()
        self.size = size
        self.pool = pool or shared_pool(self.budget.processes)
        self._built: OrderedDict[str, str] = OrderedDict()
        self._failed: OrderedDict[str, GrammarTooLarge | GrammarBuildFailed] = OrderedDict()

    def digest(self, key: Any) -> str:
        b = self.budget
        text = json.dumps([key, b.max_bytes, b.timeout_s], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    async def get(self, key: Any, func: Callable[..., str], args: tuple[Any, ...], what: str) -> str:
        """The grammar ``func(*args)`` builds, named by ``key`` (JSON): remembered, or built in a
        build process now. A failure remembered raises again at once."""
        digest = self.digest(key)
        if digest in self._built:
            self._built.move_to_end(digest)
            return self._built[digest]
        failed = self._failed.get(digest)
        if failed is not None:
            self._failed.move_to_end(digest)
            raise type(failed)(str(failed))
        try:
            grammar = await self.pool.run(func, args, self.budget, what)
        except (GrammarTooLarge, GrammarBuildFailed) as e:
            self._remember(self._failed, digest, e, self.budget.remembered_failures)
            raise
        self._remember(self._built, digest, grammar, self.size)
        return grammar

    def failed(self, key: Any) -> bool:
        return self.digest(key) in self._failed

    @staticmethod
    def _remember(table: OrderedDict[str, Any], digest: str, value: Any, size: int) -> None:
        table[digest] = value
        while len(table) > size:
            table.popitem(last=False)
