"""GBNF grammars: built for a format's tool calls, and checked before llama.cpp sees them."""

from worker.grammar.builder import GrammarBuilder
from worker.grammar.check import GrammarError, check_grammar
from worker.grammar.excluding import raw_text, text_without
from worker.grammar.spelling import literal, rule_name

__all__ = ["GrammarBuilder", "GrammarError", "check_grammar", "literal", "raw_text", "rule_name", "text_without"]
