"""Whether a GBNF grammar accepts a text: a plain recursive matcher for tests.

Fine for test strings, not for generation. Tests use it to prove that what a format renders and
parses is what its grammar lets a model write.
"""

from __future__ import annotations

from worker.grammar.check import checked_rules


def accepts(grammar: str, text: str) -> bool:
    """Whether the whole of text is a sentence of the grammar (checked first)."""
    rules = checked_rules(grammar)
    memo: dict[tuple[str, int], frozenset[int]] = {}

    def rule_ends(name: str, pos: int) -> frozenset[int]:
        key = (name, pos)
        if key not in memo:
            memo[key] = frozenset(alts_ends(rules[name].alternatives, pos))
        return memo[key]

    def alts_ends(alternatives, pos: int) -> set[int]:
        out: set[int] = set()
        for alt in alternatives:
            current = {pos}
            for item in alt:
                current = set().union(*(item_ends(item, p) for p in current)) if current else set()
            out |= current
        return out

    def once(atom, pos: int) -> set[int]:
        kind, value = atom
        if kind == "lit":
            return {pos + len(value)} if text.startswith(value, pos) else set()
        if kind == "class":
            if pos >= len(text):
                return set()
            if value is None:
                return {pos + 1}
            negated, ranges = value
            inside = any(lo <= text[pos] <= hi for lo, hi in ranges)
            return {pos + 1} if inside != negated else set()
        if kind == "ref":
            return set(rule_ends(value, pos))
        return alts_ends(value, pos)

    def item_ends(item, pos: int) -> set[int]:
        atom, lo, hi = item
        out = {pos} if lo == 0 else set()
        frontier, seen, count = {pos}, {pos}, 0
        while frontier and (hi is None or count < hi):
            count += 1
            nxt = set().union(*(once(atom, p) for p in frontier))
            if count >= lo:
                out |= nxt
            # Positions only move forward, so a bounded frontier of new positions terminates.
            frontier = nxt - seen if hi is None else nxt
            seen |= nxt
        return out

    return len(text) in rule_ends("root", 0)
