"""Checking the arguments the model wrote against a tool, once per call.

Strict (``"5"`` is not an integer, a bool is not an integer) because silently coercing hides the
model's mistakes. The result carries either the texts for the model or the validated values, so
running the call needs no second validation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from toolq.tools.function import Tool
from toolq.tools.messages import argument_errors, not_an_object

__all__ = ["CheckedCall", "check_arguments"]


@dataclass(frozen=True)
class CheckedCall:
    """A call checked against its tool: ``errors`` for the model, or else ``kwargs`` to run it with
    (the validated, coerced values keyed by the function's parameter names)."""

    name: str
    tool: Any  # the Tool or SchemaTool it was checked against; None for an unknown tool
    errors: list[str]
    kwargs: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return not self.errors and self.tool is not None and self.kwargs is not None


def check_arguments(found: Tool, arguments: Any) -> CheckedCall:
    if not isinstance(arguments, dict):
        return CheckedCall(found.name, found, [not_an_object(found.name, arguments)], None)
    try:
        # JSON input on purpose: in strict mode it takes enum values and date strings as JSON
        # would carry them, while still refusing "5" for an integer and true for a number.
        data = json.dumps(arguments, default=str, ensure_ascii=False)
        instance = found.model.model_validate_json(data, strict=True)
    except ValidationError as exc:
        return CheckedCall(found.name, found, argument_errors(found.name, found.parameters, arguments, exc), None)
    kwargs = {real: getattr(instance, internal) for internal, real in found.field_names.items()}
    return CheckedCall(found.name, found, [], kwargs)
