"""GBNF grammars checked before llama.cpp ever sees them.

An invalid grammar can take down or hang the whole llama.cpp process (a reversed ``{3,1}``
loops forever; left recursion hidden behind a nullable rule slips past llama.cpp's own check),
so every grammar a format produces goes through ``check_grammar`` first (``GrammarBuilder.render``
does it, and the engine checks again before handing a grammar to llama.cpp).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NoReturn

__all__ = ["GrammarError", "check_grammar", "checked_rules", "rule_refs"]


class GrammarError(ValueError):
    """The grammar would be rejected by llama.cpp, or worse, crash it."""


# The parsed grammar: an alternative is a list of items; an item is one of
#   ("lit", text)  ("class", (negated, [(lo, hi), ...]) or None for ".")  ("ref", name)
#   ("group", [alternatives])
# wrapped as (item, min, max) with max None meaning unbounded.


@dataclass
class Rule:
    name: str
    offset: int  # where it is defined; made a line number only for messages
    alternatives: list = field(default_factory=list)


_NAME = re.compile(r"[A-Za-z0-9-]+")
_ESCAPES = {"n", "r", "t", "\\", '"', "[", "]", "-", "x", "u", "U"}
_MAX_REPEAT = 2000  # llama.cpp refuses counts above this, or silently makes them unbounded
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.i = 0
        self.rules: dict[str, Rule] = {}
        self.refs: list[tuple[str, str, int]] = []  # (referenced, from rule, offset)
        self.current = ""

    # -- position helpers

    def line(self, i: int | None = None) -> int:
        return self.text.count("\n", 0, self.i if i is None else i) + 1

    def fail(self, msg: str) -> NoReturn:
        where = f" in rule '{self.current}'" if self.current else ""
        raise GrammarError(f"line {self.line()}{where}: {msg}")

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def space(self, newline_ok: bool) -> None:
        """Skip blanks and comments; newlines only where llama.cpp allows them."""
        t = self.text
        while self.i < len(t):
            c = t[self.i]
            if c in " \t" or (newline_ok and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(t) and t[self.i] not in "\r\n":
                    self.i += 1
            else:
                break

    # -- grammar := rule*

    def parse(self) -> None:
        self.space(True)
        while self.i < len(self.text):
            self.rule()
            self.space(True)

    def rule(self) -> None:
        m = _NAME.match(self.text, self.i)
        if not m:
            self.current = ""
            self.fail(f"expected a rule name, found {self.text[self.i : self.i + 20]!r}")
        name, start = m.group(0), self.i
        self.current = name
        self.i = m.end()
        self.space(False)
        if not self.text.startswith("::=", self.i):
            self.fail("expected '::=' after the rule name")
        self.i += 3
        self.space(True)
        if name in self.rules:
            self.fail(f"rule '{name}' is defined twice (first on line {self.line(self.rules[name].offset)})")
        rule = Rule(name, start)
        self.rules[name] = rule
        rule.alternatives = self.alternatives(nested=False)
        c = self.peek()
        if c in ("\r", "\n"):
            self.i += 1
        elif c:
            self.fail(f"unexpected {c!r}: expected a newline or the end of the rule")

    def alternatives(self, nested: bool) -> list:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> list:
        items: list = []
        while True:
            c = self.peek()
            if c == '"':
                items.append([("lit", self.literal()), 1, 1])
            elif c == "[":
                items.append([("class", self.char_class()), 1, 1])
            elif c == ".":
                self.i += 1
                items.append([("class", None), 1, 1])
            elif c == "(":
                self.i += 1
                self.space(True)
                group = self.alternatives(nested=True)
                if self.peek() != ")":
                    self.fail("unbalanced parentheses: expected ')'")
                self.i += 1
                items.append([("group", group), 1, 1])
            elif c and _NAME.match(c):
                m = _NAME.match(self.text, self.i)
                assert m is not None  # the character at i starts a name
                self.refs.append((m.group(0), self.current, self.i))
                items.append([("ref", m.group(0)), 1, 1])
                self.i = m.end()
                # "name ::=" here means the previous rule ended without a newline
                save = self.i
                self.space(False)
                if self.text.startswith("::=", self.i):
                    self.fail(f"missing newline before the definition of '{m.group(0)}'")
                self.i = save
            elif c in ("*", "+", "?", "{"):
                if not items:
                    self.fail(f"'{c}' has nothing before it to repeat")
                if items[-1][1] != 1 or items[-1][2] != 1:
                    self.fail(f"'{c}' follows another repetition; use parentheses")
                items[-1][1], items[-1][2] = self.repetition()
            elif c == ")" and not nested:
                self.fail("unbalanced parentheses: ')' without '('")
            else:
                return items
            self.space(nested)

    def repetition(self) -> tuple[int, int | None]:
        c = self.peek()
        self.i += 1
        if c == "*":
            return 0, None
        if c == "+":
            return 1, None
        if c == "?":
            return 0, 1
        m = re.compile(r"\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(self.text, self.i)
        if not m:
            self.fail("bad repetition: expected {m}, {m,} or {m,n}")
        self.i = m.end()
        lo = int(m.group(1))
        hi: int | None = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        if hi is not None and hi < lo:
            self.fail(f"bad repetition {{{lo},{hi}}}: the maximum is below the minimum")
        if max(lo, hi or 0) > _MAX_REPEAT:
            self.fail(f"repetition count above {_MAX_REPEAT} (llama.cpp refuses or silently unbounds it)")
        return lo, hi

    def char(self, end: str) -> str:
        """One possibly escaped character of a literal or class; returns its text."""
        t = self.text
        if self.i >= len(t):
            self.fail("unexpected end of grammar inside a literal or character class")
        c = t[self.i]
        if c == "\\":
            e = t[self.i + 1 : self.i + 2]
            if e not in _ESCAPES:
                self.fail(f"unknown escape '\\{e}'")
            if e in _HEX_LEN:
                digits = t[self.i + 2 : self.i + 2 + _HEX_LEN[e]]
                if len(digits) != _HEX_LEN[e] or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                    self.fail(f"escape '\\{e}' needs {_HEX_LEN[e]} hex digits")
                self.i += 2 + _HEX_LEN[e]
                return chr(int(digits, 16)) if int(digits, 16) <= 0x10FFFF else "?"
            self.i += 2
            return {"n": "\n", "r": "\r", "t": "\t"}.get(e, e)
        if c in "\r\n":
            self.fail("unterminated string literal" if end == '"' else "bad character class: unterminated '['")
        self.i += 1
        return c

    def literal(self) -> str:
        self.i += 1
        out = []
        while self.peek() != '"':
            if not self.peek():
                self.fail("unterminated string literal")
            out.append(self.char('"'))
        self.i += 1
        return "".join(out)

    def char_class(self) -> tuple[bool, list[tuple[str, str]]]:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges = []
        while self.peek() != "]":
            if not self.peek():
                self.i = start
                self.fail("bad character class: unterminated '['")
            lo = hi = self.char("]")
            if self.peek() == "-" and self.text[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self.char("]")
                if ord(hi) < ord(lo):
                    self.fail(f"bad character class: range {lo!r}-{hi!r} is reversed")
            ranges.append((lo, hi))
        if not ranges:
            self.fail("bad character class: it is empty")
        self.i += 1
        return negated, ranges


def _nullable_item(item, nullable: set[str]) -> bool:
    (kind, value), lo, _hi = item
    if lo == 0:
        return True
    if kind == "lit":
        return value == ""
    if kind == "ref":
        return value in nullable
    if kind == "group":
        return any(all(_nullable_item(i, nullable) for i in alt) for alt in value)
    return False


def _left_refs(alternatives, nullable: set[str], out: set[str]) -> set[str]:
    """Rules that can be entered before any character is consumed."""
    for alt in alternatives:
        for item in alt:
            kind, value = item[0]
            if kind == "ref":
                out.add(value)
            elif kind == "group":
                _left_refs(value, nullable, out)
            if not _nullable_item(item, nullable):
                break
    return out


def _walk_items(alternatives):
    for alt in alternatives:
        for item in alt:
            yield item
            if item[0][0] == "group":
                yield from _walk_items(item[0][1])


def rule_refs(body: str) -> set[str]:
    """The rule names one rule's body refers to (GrammarError when it does not parse)."""
    p = _Parser(f"x ::= {body}\n")
    try:
        p.parse()
    except RecursionError:
        raise GrammarError("the grammar nests too deeply to check") from None
    return {ref for ref, _owner, _offset in p.refs}


def check_grammar(text: str) -> None:
    """Raise GrammarError with a readable message unless text is a safe GBNF grammar.

    Checks the syntax as llama.cpp reads it, then: a root rule, every referenced rule defined,
    no rule defined twice, repetition counts llama.cpp takes, no left recursion (llama.cpp
    recurses forever on it), and no unbounded repetition of something that can match nothing
    (some llama.cpp versions loop on it; our generators never need it, so it is refused).
    """
    try:
        checked_rules(text)
    except RecursionError:
        raise GrammarError("the grammar nests too deeply to check") from None


def checked_rules(text: str) -> dict[str, Rule]:
    """check_grammar, returning the parsed rules (a matcher such as tests/support/gbnf_match.py walks them)."""
    if not isinstance(text, str) or not text.strip():
        raise GrammarError("the grammar is empty")
    p = _Parser(text)
    p.parse()
    rules = p.rules
    if "root" not in rules:
        raise GrammarError("the grammar has no 'root' rule")
    for ref, owner, offset in p.refs:
        if ref not in rules:
            raise GrammarError(f"line {p.line(offset)} in rule '{owner}': undefined rule '{ref}'")

    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for r in rules.values():
            if r.name not in nullable and any(all(_nullable_item(i, nullable) for i in alt) for alt in r.alternatives):
                nullable.add(r.name)
                changed = True

    for r in rules.values():
        for item in _walk_items(r.alternatives):
            if item[2] is None and _nullable_item([item[0], 1, 1], nullable):
                raise GrammarError(
                    f"line {p.line(r.offset)} in rule '{r.name}': an unbounded repetition of something that can match "
                    "the empty string would loop forever"
                )

    graph = {name: _left_refs(r.alternatives, nullable, set()) for name, r in rules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                where = p.line(rules[nxt].offset)
                raise GrammarError(f"left recursion: {' -> '.join(cycle)} (rule '{nxt}', line {where})")
            if nxt not in state:
                visit(nxt, path)
        path.pop()
        state[name] = 2

    for name in sorted(rules):
        if name not in state:
            visit(name, [])
    return rules
