"""GBNF for text that never contains a given string: free content before a call's trigger, or a
raw argument value before its closing tag.

A literal-free ``[^<]`` is too strict (no ``<`` at all) and hand-written nests miss overlaps
(``<<tool_call>``), so the rules are the states of the string's matching automaton: state k means
"the text ends with the first k characters of the string", and no transition reaches the end.
"""

from __future__ import annotations

from worker.grammar.builder import GrammarBuilder
from worker.grammar.spelling import literal, rule_name

__all__ = ["raw_text", "text_without"]


def _class_char(ch: str) -> str:
    if ch in "\\]^-[":
        return "\\" + ch
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\x{ord(ch):02X}"
    return ch


def _next_state(s: str, k: int, ch: str) -> int:
    """The longest prefix of s that s[:k] + ch ends with."""
    text = s[:k] + ch
    for n in range(min(len(text), len(s)), 0, -1):
        if text.endswith(s[:n]):
            return n
    return 0


def text_without(b: GrammarBuilder, s: str, name: str = "") -> str:
    """Add rules for any text (possibly empty) in which ``s`` never occurs; return the rule name.

    Such text may end with a proper prefix of ``s``: it is followed by ``s`` itself only where
    ``s`` is the markup the grammar writes next.
    """
    if not s:
        raise ValueError("text_without needs a non-empty string")
    base = rule_name(name or "text-without-" + s)
    chars = sorted(set(s))
    states = [f"{base}-{k}" for k in range(len(s))]
    for k, state in enumerate(states):
        # Characters that keep a partial match going (or would complete one) get their own
        # alternative; every other character goes back to state 0.
        moves = {ch: _next_state(s, k, ch) for ch in chars}
        special = [ch for ch in chars if moves[ch] != 0]
        others = "[^" + "".join(_class_char(c) for c in special) + "]"  # never empty: s[k] moves on
        alternatives = [f"{others} {states[0]}"]
        alternatives += [f"{literal(ch)} {states[moves[ch]]}" for ch in special if moves[ch] < len(s)]
        b.rules[state] = "(" + " | ".join(alternatives) + ")?"
    return states[0]


def raw_text(b: GrammarBuilder, end: str, schema: object, name: str = "") -> str:
    """GBNF for a string argument written raw up to the markup ``end``: any text without ``end``,
    or, when the schema bounds its length, at most that many characters other than the first of
    ``end`` (a model that never closes the value must still stop)."""
    limit = schema.get("maxLength") if isinstance(schema, dict) else None
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= 2000:
        return f"[^{_class_char(end[0])}]{{0,{limit}}}"
    return text_without(b, end, name)
