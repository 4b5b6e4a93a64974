"""JSON Schema to GBNF for tool arguments, by llama.cpp's own converter.

llama-cpp-python ships llama.cpp's converter as ``llama_cpp.llama_grammar.SchemaConverter``: types,
required and optional keys in declaration order, enum and const, anyOf/oneOf/allOf, ``$ref``,
string formats and patterns, minLength/maxLength, minItems/maxItems. ``ArgumentSchemas`` writes
its rules into the grammar a format is building (worker/grammar/builder.py) and adds what a
worker needs on top:

- rules are named from the name the builder passes (one per tool), ``$ref`` definitions included,
  so two tools that both define ``Item`` never share a rule;
- a schema, or a part of one, that the converter cannot turn into a valid grammar (an unknown
  type, an annotation-only schema, a pattern GBNF cannot spell, a bound that nests too deeply,
  an unresolvable ``$ref``, nesting deeper than MAX_DEPTH) is read without the offending keyword,
  or else as any value of its JSON type, or any JSON value: a caller's schema never stops a
  grammar from being built, and never makes an invalid one;
- literals are fully escaped and keep non-ASCII characters as themselves, and a JSON string
  refuses raw control characters (the converter in this llama-cpp-python lets both through).

- the grammar text it writes is counted against the budget of the grammar being built
  (worker/grammar/budget.py), and a repetition that would pass it is refused before it is
  written out (GrammarTooLarge): the converter writes ``minLength: N`` as N elements.

The builder checks the whole grammar with worker/grammar/check.py before anyone uses it.
Importing this module loads the llama.cpp library, never a model.
"""

from __future__ import annotations

import copy
import json
from itertools import islice
from typing import Any

from llama_cpp.llama_grammar import INVALID_RULE_CHARS_RE, PRIMITIVE_RULES, SPACE_RULE, BuiltinRule, SchemaConverter

from toolq.wire.schema_bounds import pattern_repetitions
from worker.grammar.budget import GrammarTooLarge, current_budget
from worker.grammar.check import check_grammar, rule_refs
from worker.grammar.spelling import literal

__all__ = ["MAX_DEPTH", "ArgumentSchemas"]

MAX_DEPTH = 12  # schemas nested deeper become "any JSON value" rather than a giant grammar

# A character of a JSON string: no raw control characters or DEL, which JSON forbids.
_JSON_CHAR = BuiltinRule(
    '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])', []
)
_JSON_TYPES = {"string", "integer", "number", "boolean", "null", "object", "array"}
# Keywords that put the caller's text or counts into the grammar: what they add is checked at
# once, and dropped if it does not pass.
_CHECKED_KEYWORDS = ("pattern", "minLength", "maxLength", "minItems", "maxItems")


class ArgumentSchemas(SchemaConverter):
    """llama.cpp's converter writing into ``rules``, the rule table of the grammar being built."""

    def __init__(self, rules: dict[str, str]):
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        rules.setdefault("space", SPACE_RULE)
        self._rules = rules
        self._depth = 0
        self._schemas = 0  # schemas converted so far: each gets its own $ref namespace
        self._prefix = ""
        self._ref_names: dict[str, str] = {}  # resolved $ref -> its rule, once named
        self._resolving: set[str] = set()  # rules of $refs still being converted (referenced before defined)
        self._max_bytes = current_budget().max_bytes
        self._written = 0  # bytes of rules written, failed attempts included

    # -- what the builder calls

    def argument_rule(self, schema: Any, name: str) -> str:
        """Add the rules matching one value of ``schema``, named from ``name``; return the rule name."""
        self._schemas += 1
        self._prefix = name
        if isinstance(schema, dict):
            schema = self._resolved(schema)
        return self.visit(schema, name)

    def primitive(self, name: str) -> str:
        """A built-in rule (``string``, ``integer``, ``value``, ...) and the rules it needs."""
        return "space" if name == "space" else self._add_primitive(name, PRIMITIVE_RULES[name])

    # -- the converter, guarded

    def visit(self, schema: Any, name: str) -> str:
        if not isinstance(schema, dict) or not schema or self._depth > MAX_DEPTH:
            return self.primitive("value")
        kind = schema.get("type")
        if kind is not None and not isinstance(kind, list) and not (isinstance(kind, str) and kind in _JSON_TYPES):
            return self.primitive("value")
        if "enum" in schema and not (isinstance(schema["enum"], list) and schema["enum"]):
            schema = {k: v for k, v in schema.items() if k != "enum"}  # an empty enum would match nothing
        before = self._mark()
        self._depth += 1
        try:
            self._afford(schema, name)
            rule = super().visit(schema, name)
            if any(k in schema for k in _CHECKED_KEYWORDS):
                self._check_added(before, rule)
            return rule
        except GrammarTooLarge:
            raise
        except Exception:  # the converter asserts on what it does not support; the check raises GrammarError
            self._forget(before)
            plain = {k: v for k, v in schema.items() if k not in _CHECKED_KEYWORDS}
            if plain != schema:
                return self.visit(plain, name)
            return self.primitive(kind if isinstance(kind, str) else "value")
        finally:
            self._depth -= 1

    def _resolve_ref(self, ref: str) -> str:
        name = self._ref_names.get(ref)
        if name is not None:
            return name  # converted already, or being converted (a recursive schema)
        target = self._refs[ref]  # KeyError when unresolved: the visit of the $ref falls back
        name = self._free_name(f"{self._prefix}-{ref.rsplit('/', 1)[-1]}")
        self._ref_names[ref] = name
        before = self._mark()
        self._resolving.add(name)
        try:
            rule = self.visit(target, name)
            if rule != name:
                self._rules[name] = rule  # a primitive, or a fallback: give it the ref's name
            self._check_added(before, name)  # a recursive definition may recurse on the left
        except GrammarTooLarge:
            raise
        except Exception:
            self._forget(before)
            self._rules[name] = self.primitive("value")
        finally:
            self._resolving.discard(name)
        return name

    def _format_literal(self, literal_text: str) -> str:
        # The converter passes JSON it wrote with json.dumps (object keys, enum and const values).
        try:
            literal_text = json.dumps(json.loads(literal_text), ensure_ascii=False)
        except ValueError:
            pass
        return literal(literal_text)

    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        return super()._add_primitive(name, _JSON_CHAR if name == "char" else rule)

    # -- the budget

    def _add_rule(self, name: str, rule: str) -> str:
        self._written += len(name) + len(rule)
        if self._written > self._max_bytes:
            raise GrammarTooLarge(self._over(name))
        return super()._add_rule(name, rule)

    def _afford(self, schema: dict, name: str) -> None:
        """Refuse a repetition the converter would write out past the budget, before it does."""
        counts = [schema.get(k) for k in _CHECKED_KEYWORDS[1:]]
        repeats = sum(int(c) for c in counts if isinstance(c, (int, float)) and not isinstance(c, bool) and c >= 0)
        if isinstance(schema.get("pattern"), str):
            repeats += pattern_repetitions(schema["pattern"])
        # each repetition costs at least the item rule's name, a separator and a bracket
        if repeats and self._written + repeats * (len(name) + 8) > self._max_bytes:
            raise GrammarTooLarge(self._over(name))

    def _over(self, name: str) -> str:
        return (
            f"the grammar of {name} would be larger than the worker's budget of {self._max_bytes} bytes "
            "(TOOLQ_GRAMMAR_MAX_BYTES): lower its schema's lengths, item counts or pattern quantifiers"
        )

    # -- bookkeeping

    def _resolved(self, schema: dict) -> dict:
        """A copy of schema with its local ``$ref``s resolved (resolve_refs rewrites them in place).

        resolve_refs does not look inside a node that has a ``$ref`` of its own, so a root
        ``{"$ref": ..., "$defs": ...}`` is resolved without its ``$ref`` first, then with it.
        """
        doc = copy.deepcopy(schema)
        url = str(self._schemas)  # each schema's refs are its own, even where two tools share a name
        try:
            root_ref = doc.pop("$ref", None)
            self.resolve_refs(doc, url)
            if root_ref is not None:
                doc["$ref"] = root_ref
                self.resolve_refs(doc, url)
            return doc
        except Exception:  # a $ref it cannot resolve: such refs fall back where they are used
            return copy.deepcopy(schema)

    def _free_name(self, name: str) -> str:
        """A rule name no rule has, nor any definition still being converted."""
        name = INVALID_RULE_CHARS_RE.sub("-", name)
        candidate, i = name, 1
        while candidate in self._rules or candidate in self._ref_names.values():
            i += 1
            candidate = f"{name}-{i}"
        return candidate

    # A mark is how many rules and resolved $refs there were. Both tables only ever grow at their
    # end while a schema is converted (dicts keep insertion order, a rule rewritten keeps its
    # place) and only what came after a mark is ever dropped, so what a conversion added is the
    # tail past its mark: found and dropped in time linear in what it added, not in the grammar.

    def _mark(self) -> tuple[int, int]:
        return len(self._rules), len(self._ref_names)

    def _added(self, mark: tuple[int, int]) -> list[str]:
        return list(islice(reversed(self._rules), len(self._rules) - mark[0]))[::-1]

    def _forget(self, mark: tuple[int, int]) -> None:
        """Drop what a failed conversion added."""
        while len(self._rules) > mark[0]:
            self._rules.popitem()
        while len(self._ref_names) > mark[1]:
            self._ref_names.popitem()

    def _check_added(self, mark: tuple[int, int], rule: str) -> None:
        """Check the rules added since ``mark`` (raises GrammarError). The rules they refer to that
        existed before, and definitions still being converted, stand in as stubs: each is checked
        on its own. Only referenced rules are stubbed, so a check costs what it checks, and a
        grammar of many checked subschemas builds in linear time."""
        added = self._added(mark)
        own = set(added)
        wanted = {rule}
        for k in added:
            wanted.update(rule_refs(self._rules[k]))
        stubs = {k for k in wanted - own - {"root"} if k in self._rules or k in self._resolving}
        lines = [f"{k} ::= {self._rules[k]}" for k in added]
        lines += [f'{k} ::= "x"' for k in sorted(stubs)]
        lines.append(f"root ::= {rule}")
        check_grammar("\n".join(lines) + "\n")
