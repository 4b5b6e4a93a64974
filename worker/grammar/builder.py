"""Building a format's GBNF grammar: its own rules, argument schemas, and the {name, arguments} call.

A format adds the rules that spell its tags and layout; argument schemas go through llama.cpp's
own JSON-Schema converter (worker/grammar/schema_grammar.py), writing into the same rule table;
``render`` checks the result before anyone can hand it to llama.cpp.
"""

from __future__ import annotations

from typing import Any

from worker.grammar.budget import GrammarTooLarge, current_budget
from worker.grammar.check import check_grammar
from worker.grammar.schema_grammar import ArgumentSchemas
from worker.grammar.spelling import literal, rule_name

__all__ = ["GrammarBuilder", "literal", "rule_name"]


class GrammarBuilder:
    """Collects rules; ``add`` never silently replaces a different rule of the same name."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self._schemas = ArgumentSchemas(self.rules)

    def add(self, name: str, body: str) -> str:
        name = rule_name(name)
        candidate, i = name, 1
        while candidate in self.rules and self.rules[candidate] != body:
            # Two tools whose names sanitize alike ("a_b", "a-b") get distinct rules.
            i += 1
            candidate = f"{name}-{i}"
        self.rules[candidate] = body
        return candidate

    def primitive(self, name: str) -> str:
        """A built-in JSON rule (``space``, ``string``, ``integer``, ``value``...) and what it needs."""
        return self._schemas.primitive(name)

    def schema(self, schema: Any, name: str) -> str:
        """Add rules for a JSON schema, named from ``name``; return the rule matching one value of it."""
        return self._schemas.argument_rule(schema, name)

    def call_object(self, base: str, name_literal: str, parameters: Any) -> str:
        """``{"name": <the tool's name>, "arguments": <its parameters>}`` for one tool, the object
        every JSON call format writes; returns the rule name. ``name_literal`` is the GBNF for the
        name as the format spells it (formats that escape characters pass their own)."""
        name = self.add(base + "-name", name_literal + " space")
        args = self.schema(parameters, base + "-arguments")
        name_kv = self.add(base + "-name-kv", f'"\\"name\\"" space ":" space {name}')
        args_kv = self.add(base + "-arguments-kv", f'"\\"arguments\\"" space ":" space {args}')
        return self.add(base, f'"{{" space {name_kv} "," space {args_kv} "}}" space')

    def render(self) -> str:
        """The grammar text, root first; checked, so an invalid grammar raises GrammarError here."""
        names = sorted(self.rules, key=lambda n: (n != "root", n))
        text = "\n".join(f"{n} ::= {self.rules[n]}" for n in names) + "\n"
        budget = current_budget().max_bytes
        if len(text) > budget:  # every tool's schema within bounds, but all of them together past it
            raise GrammarTooLarge(
                f"the grammar is {len(text)} bytes, above the worker's budget of {budget} (TOOLQ_GRAMMAR_MAX_BYTES)"
            )
        check_grammar(text)
        return text
