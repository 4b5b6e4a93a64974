"""How GBNF spells a string literal and a rule name, for the grammar builder and the schema converter."""

from __future__ import annotations

import re

__all__ = ["literal", "rule_name"]


def literal(text: str) -> str:
    """A GBNF string literal matching text exactly."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def rule_name(name: str) -> str:
    """A valid rule name from any text: GBNF names allow only letters, digits and '-'."""
    cleaned = re.sub(r"[^A-Za-z0-9-]+", "-", str(name)).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    return cleaned or "x"
