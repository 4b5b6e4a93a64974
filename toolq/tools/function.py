"""A Python function as a tool: its name, description, argument schema and model."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from toolq.tools.docstrings import parse_docstring
from toolq.tools.errors import ToolRegistrationError
from toolq.tools.signature import arguments_model, order_keys, parameters_schema
from toolq.wire.definitions import NAME_RE, function_spec

__all__ = ["Tool", "make_tool"]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    is_async: bool
    parameters: dict[str, Any]  # the cleaned JSON schema of the arguments object
    timeout_s: float | None
    model: type[BaseModel] = dataclasses.field(repr=False)
    # internal pydantic field name -> the function's parameter name (see signature.arguments_model)
    field_names: dict[str, str] = dataclasses.field(repr=False)
    requires_approval: bool = False  # every call waits for the caller's approval (the job pauses)
    # a second run under the same effect key has no second effect; None: the default of where it
    # runs (false in a worker, true in a tool service, whose calls are delivered at least once)
    idempotent: bool | None = None

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec; a fresh copy, so callers may mutate it."""
        return function_spec(self.name, self.description, self.parameters)


def make_tool(
    fn: Callable[..., Any],
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    requires_approval: bool = False,
    idempotent: bool | None = None,
) -> Tool:
    """The Tool for ``fn``; raises ToolRegistrationError when ``fn`` cannot be one."""
    if not callable(fn):
        raise ToolRegistrationError(f"@tool needs a function, got {type(fn).__name__}")
    tool_name = name or getattr(fn, "__name__", None) or type(fn).__name__
    if not NAME_RE.match(tool_name):
        raise ToolRegistrationError(f"tool name {tool_name!r} is invalid: use 1-64 letters, digits, '_' or '-'")
    if timeout_s is not None and not timeout_s > 0:
        raise ToolRegistrationError(f"tool {tool_name!r}: timeout_s must be > 0, got {timeout_s}")
    doc = parse_docstring(inspect.getdoc(fn) or "")
    model, field_names = arguments_model(fn, tool_name)
    parameters = parameters_schema(model, tool_name)
    for arg, text in doc.arguments.items():
        prop = parameters["properties"].get(arg)
        if prop is not None and "description" not in prop:  # an explicit Field description wins
            parameters["properties"][arg] = order_keys({**prop, "description": text})
    return Tool(
        name=tool_name,
        description=description if description is not None else doc.summary,
        fn=fn,
        is_async=_is_async(fn),
        parameters=parameters,
        timeout_s=timeout_s,
        model=model,
        field_names=field_names,
        requires_approval=requires_approval,
        idempotent=idempotent,
    )


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004  # a callable instance: its __call__ method
