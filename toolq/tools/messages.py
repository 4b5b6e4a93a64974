"""What the model reads when its call is wrong: one line per problem, saying what was expected
and what it wrote, in JSON terms (``integer``, ``the string "15"``), so it can correct itself.

The texts name the argument by its path (``items[2].x``), found by walking pydantic's error
location through the tool's schema and the arguments together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

__all__ = ["argument_errors", "not_an_object", "signature_text", "unknown_tool"]


def unknown_tool(name: str, available: Iterable[str]) -> str:
    return f"unknown tool {name!r}; available tools: {', '.join(available) or '(none)'}"


def not_an_object(name: str, arguments: Any) -> str:
    return f"arguments for {name!r} must be a JSON object, got {_describe_value(arguments)}"


def argument_errors(
    name: str, parameters: dict[str, Any], arguments: dict[str, Any], exc: ValidationError
) -> list[str]:
    """One text per problem pydantic found in ``arguments`` for the tool ``name``."""
    out: list[str] = []
    seen: set[str] = set()
    unknown: list[str] = []
    for err in exc.errors():
        kind = err["type"]
        path, schema, value = _locate(parameters, arguments, tuple(err["loc"]))
        if value is _MISSING:
            value = err.get("input")
        if kind == "extra_forbidden":
            unknown.append(path or ".".join(str(p) for p in err["loc"]))
            continue
        if kind == "missing":
            text = f"missing required argument {path!r} ({_expected(schema)})"
        elif _is_type_error(kind):
            text = f"argument {path!r} must be {_expected(schema)}, got {_describe_value(value)}"
        else:  # a constraint such as ge=0 or max_length: pydantic's wording is clear enough
            msg = err["msg"]
            msg = msg[len("Input ") :] if msg.startswith("Input ") else f"is invalid: {msg}"
            text = f"argument {path!r} {msg}, got {_describe_value(value)}"
        if text not in seen:  # a union reports once per alternative; say it once
            seen.add(text)
            out.append(text)
    if unknown:
        listed = ", ".join(repr(u) for u in unknown)
        noun = "argument" if len(unknown) == 1 else "arguments"
        out.append(f"unknown {noun} {listed}; {name} takes: {signature_text(parameters)}")
    return out


def signature_text(parameters: dict[str, Any]) -> str:
    """e.g. ``zorb (integer, required), mode (one of "add","sub", default "add")``."""
    required = set(parameters.get("required", []))
    parts = []
    for arg, schema in parameters.get("properties", {}).items():
        if arg in required:
            tail = "required"
        elif "default" in schema:
            tail = "default " + _json(schema["default"])
        else:
            tail = "optional"
        parts.append(f"{arg} ({_type_name(schema)}, {tail})")
    return ", ".join(parts) or "no arguments"


# ---------------------------------------------------------------------------------------------
# Describing types and values


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


_SIMPLE_NAMES = {
    "integer": "integer",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "object": "object",
    "null": "null",
    "array": "array",
}
_PLURALS = {
    "integer": "integers",
    "number": "numbers",
    "string": "strings",
    "boolean": "booleans",
    "object": "objects",
    "array": "arrays",
}


def _type_name(schema: dict[str, Any]) -> str:
    """A short name: ``integer``, ``array of strings``, ``one of "a","b"``."""
    if "enum" in schema:
        return "one of " + ",".join(_json(v) for v in schema["enum"])
    if "const" in schema:
        return "exactly " + _json(schema["const"])
    if "anyOf" in schema:
        return " or ".join(_type_name(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), dict):
        item = _type_name(schema["items"])
        return "array of " + _PLURALS.get(item, f"({item})")
    if isinstance(kind, str):
        return _SIMPLE_NAMES.get(kind, kind)
    return "any value"


def _expected(schema: dict[str, Any]) -> str:
    """The type name with an article, for "must be ..."."""
    if "anyOf" in schema:
        return " or ".join(_expected(s) for s in schema["anyOf"])
    text = _type_name(schema)
    if text == "boolean":
        return "a boolean (true or false)"
    if text.startswith(("one of", "exactly", "any value", "null")):
        return text
    return ("an " if text[0] in "aeiou" else "a ") + text


def _describe_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "the boolean " + ("true" if value else "false")
    if isinstance(value, (int, float)):
        return f"the number {_json(value)}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return "the string " + _json(shown)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def _is_type_error(kind: str) -> bool:
    return kind.endswith(("_type", "_parsing")) or kind in {"literal_error", "enum", "int_from_float", "none_required"}


# ---------------------------------------------------------------------------------------------
# Finding where an error is

_MISSING = object()


def _locate(parameters: dict[str, Any], arguments: Any, loc: tuple[Any, ...]) -> tuple[str, dict[str, Any], Any]:
    """Walk an error location through the schema and the arguments together.

    Returns (readable path like ``items[2].x``, schema there, value there). The walk stops at a
    union, whose pydantic locations carry one member tag per alternative: the error is reported
    once, at the union, with all alternatives as the expectation.
    """
    schema: dict[str, Any] = parameters
    value: Any = arguments
    path = ""
    for step in loc:
        if "anyOf" in schema:
            break
        props = schema.get("properties") or {}
        if isinstance(step, str) and step in props:
            schema = props[step]
            path = f"{path}.{step}" if path else step
        elif isinstance(step, str) and isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
            path = f"{path}.{step}" if path else step
        elif isinstance(step, int) and isinstance(schema.get("items"), dict):
            schema = schema["items"]
            path = f"{path}[{step}]"
        else:
            break
        value = _step_into(value, step)
    return path, schema, value


def _step_into(value: Any, step: Any) -> Any:
    try:
        return value[step]
    except (KeyError, IndexError, TypeError):
        return _MISSING
