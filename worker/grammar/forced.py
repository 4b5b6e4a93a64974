"""The text a grammar forces next: where only one character can follow, the model has no choice.

A tool call under a grammar is mostly forced text: ``<tool_call>``, the one tool's name, the
argument keys in their order. Sampling it costs one decode step a token; evaluated as a chunk
(worker/engine/scheduler.py), it costs a fraction of that. This module follows the text a
sequence has written through the grammar, character by character, and says what comes next
when every way the grammar can go agrees on it.

The grammar (already checked by worker/grammar/check.py) is turned into plain rules of single
characters: literals split, groups and repetitions made into rules of their own. The state is the
set of stacks of symbols still to match, as llama.cpp's own grammar keeps it. Anything unexpected
(a grammar too ambiguous, text the grammar does not take) ends the forcing, never the sequence:
the engine checks every forced token against llama.cpp's grammar before it takes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from worker.grammar.check import checked_rules

# A terminal: (negated, ranges), or None for any character; a nonterminal: a rule name.
Terminal = tuple[bool, tuple[tuple[str, str], ...]] | None
Symbol = str | tuple[str, Terminal]  # ("t", terminal) for a terminal
Stack = tuple[Symbol, ...]

MAX_STACKS = 256  # beyond this many ways to go, nothing is forced


Rules = dict[str, list[tuple[Symbol, ...]]]


@lru_cache(maxsize=64)
def plain_rules(gbnf: str) -> Rules:
    """The grammar as rules of single characters (cached: every job with the same tools shares it)."""
    return _Plain(gbnf).rules


class Forced:
    """One sequence's place in its grammar."""

    def __init__(self, gbnf: str):
        self.rules = plain_rules(gbnf)
        self.stacks: frozenset[Stack] | None = self._close({("root",)})

    # -------------------------------------------------------------- following text

    def _close(self, stacks: Iterable[Stack]) -> frozenset[Stack] | None:
        """Every stack with a terminal (or nothing: the end) on top; None when too many."""
        todo = list(stacks)
        seen: set[Stack] = set()
        done: set[Stack] = set()
        while todo:
            stack = todo.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if len(seen) > MAX_STACKS * 8 or len(done) > MAX_STACKS:
                return None
            if not stack or isinstance(stack[0], tuple):
                done.add(stack)
                continue
            for alt in self.rules[stack[0]]:
                todo.append(alt + stack[1:])
        return frozenset(done)

    def feed(self, text: str) -> None:
        """Follow ``text``; after text the grammar does not take, nothing is forced any more."""
        for c in text:
            if self.stacks is None:
                return
            moved = [s[1:] for s in self.stacks if s and _matches(s[0], c)]
            self.stacks = self._close(moved) if moved else None

    def next_text(self, limit: int = 64) -> str:
        """The characters every way the grammar can go agrees on, up to ``limit`` (empty when
        the text may end here or may go on in more than one way). Does not move the state."""
        stacks = self.stacks
        out: list[str] = []
        while stacks and len(out) < limit:
            chars = {_single(s[0]) if s else None for s in stacks}
            if len(chars) != 1 or None in chars:
                break
            c = chars.pop()
            assert c is not None
            out.append(c)
            stacks = self._close(s[1:] for s in stacks)
        return "".join(out)


class _Plain:
    """Literals split into characters, groups and repetitions made into rules of their own."""

    def __init__(self, gbnf: str):
        self.rules: Rules = {}
        self._n = 0
        for name, rule in checked_rules(gbnf).items():
            self.rules[name] = [self._sequence(alt) for alt in rule.alternatives]

    def _new_rule(self, alternatives: list[tuple[Symbol, ...]]) -> str:
        self._n += 1
        name = f" {self._n}"  # a space: never a GBNF rule name
        self.rules[name] = alternatives
        return name

    def _sequence(self, items: Iterable) -> tuple[Symbol, ...]:
        out: list[Symbol] = []
        for atom, lo, hi in items:
            one = self._atom(atom)
            out.extend(one * lo)
            if hi is None:  # R ::= one R | ""
                name = self._new_rule([])
                self.rules[name] = [(*one, name), ()]
                out.append(name)
            elif hi > lo:  # O_k ::= one O_(k-1) | "", nested
                inner: tuple[Symbol, ...] = ()
                for _ in range(hi - lo):
                    inner = (self._new_rule([(*one, *inner), ()]),)
                out.extend(inner)
        return tuple(out)

    def _atom(self, atom: tuple) -> tuple[Symbol, ...]:
        kind, value = atom
        if kind == "lit":
            return tuple(("t", (False, ((c, c),))) for c in value)
        if kind == "class":
            return (("t", None if value is None else (value[0], tuple(value[1]))),)
        if kind == "ref":
            return (value,)
        return (self._new_rule([self._sequence(alt) for alt in value]),)


def _single(symbol: Symbol) -> str | None:
    """The one character a terminal takes, or None."""
    if not isinstance(symbol, tuple):
        return None
    term = symbol[1]
    if term is None or term[0] or len(term[1]) != 1 or term[1][0][0] != term[1][0][1]:
        return None
    return term[1][0][0]


def _matches(symbol: Symbol, c: str) -> bool:
    assert isinstance(symbol, tuple)
    term = symbol[1]
    if term is None:
        return True
    negated, ranges = term
    return any(lo <= c <= hi for lo, hi in ranges) != negated
