"""A tool known only by its JSON Schema: a caller's function definition, a tool service's tool as
the worker sees it, an MCP server's tool.

Its calls are checked with jsonschema against the whole schema, so what the grammar could not
express (``minimum``, ``pattern``, ``format``, ``uniqueItems``...) is enforced after generation,
and the model is told what to fix in the same words as for a registry tool. The caller's regexes
run on RE2 (toolq/wire/re2_validator.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import ValidationError

from toolq.tools.messages import not_an_object, signature_text
from toolq.tools.validation import CheckedCall
from toolq.wire.definitions import function_spec
from toolq.wire.re2_validator import re2_validator

__all__ = ["SchemaTool"]

_MAX_ERRORS = 8  # the model reads these; past a few, more lines only confuse it


@dataclass(frozen=True)
class SchemaTool:
    name: str
    description: str
    parameters: dict[str, Any]
    requires_approval: bool = False
    timeout_s: float | None = None
    _validator: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validator = re2_validator(self.parameters)
        object.__setattr__(self, "_validator", validator)

    def spec(self) -> dict[str, Any]:
        return function_spec(self.name, self.description, self.parameters)

    def check(self, arguments: Any) -> CheckedCall:
        if not isinstance(arguments, dict):
            return CheckedCall(self.name, self, [not_an_object(self.name, arguments)], None)
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return CheckedCall(self.name, self, [], dict(arguments))
        texts = [self._text(e) for e in errors[:_MAX_ERRORS]]
        return CheckedCall(self.name, self, list(dict.fromkeys(texts)), None)

    def _text(self, e: ValidationError) -> str:
        path = _path(e.absolute_path)
        if e.validator == "required":
            return f"{e.message} ({self.name} takes: {signature_text(self.parameters)})"
        if e.validator == "additionalProperties":
            return f"{e.message}; {self.name} takes: {signature_text(self.parameters)}"
        return f"argument {path!r}: {e.message}" if path else e.message


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out
