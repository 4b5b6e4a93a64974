"""The arguments of a tool, from its function's signature and type hints.

Registering a function builds a pydantic model from its parameters; that model validates what the
model wrote, and its JSON schema, cleaned up here, is what the model is shown: $defs inlined (the
grammar builder and small models both read a self-contained schema), titles dropped, ``Optional[X]
= None`` shown as plain X, and ``type`` and ``description`` first in every property.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from toolq.tools.errors import ToolRegistrationError

__all__ = ["arguments_model", "order_keys", "parameters_schema"]


def arguments_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], dict[str, str]]:
    """(the model of ``fn``'s arguments, its internal field name -> the function's parameter name)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolRegistrationError(f"tool {name!r}: cannot read the signature: {exc}") from exc
    hints = _type_hints(fn, name)
    fields: dict[str, Any] = {}
    field_names: dict[str, str] = {}
    for i, param in enumerate(sig.parameters.values()):
        _check_param(param, name, hints)
        # Internal names are neutral and the real name is the alias: parameters called ``json``,
        # ``schema`` or ``_x`` would otherwise clash with BaseModel or be refused by pydantic.
        internal = f"p{i}"
        field_names[internal] = param.name
        fields[internal] = _field(param, hints[param.name])
    config = ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=False)
    try:
        model = create_model(f"{name}_arguments", __config__=config, **fields)
    except Exception as exc:
        raise ToolRegistrationError(f"tool {name!r}: unsupported parameter types: {exc}") from exc
    return model, field_names


def parameters_schema(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The cleaned JSON schema of the arguments object, keyed by the function's parameter names."""
    try:
        raw = model.model_json_schema(by_alias=True)
    except Exception as exc:
        raise ToolRegistrationError(f"tool {name!r}: no JSON schema for its types: {exc}") from exc
    defs = raw.get("$defs", {})
    props = {}
    for arg, schema in raw.get("properties", {}).items():
        props[arg] = order_keys(_simplify_optional(_inline(schema, defs, (), name)))
    return {"type": "object", "properties": props, "required": list(raw.get("required", []))}


_KEY_ORDER = ("type", "description", "enum", "const", "items", "properties", "required", "default")


def order_keys(schema: dict[str, Any]) -> dict[str, Any]:
    """type and description first: the schema is read by small models, top to bottom."""
    ordered = {k: schema[k] for k in _KEY_ORDER if k in schema}
    ordered.update({k: v for k, v in schema.items() if k not in ordered})
    return ordered


def _type_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)  # noqa: B004  # a callable instance: its __call__ method
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # a forward reference that cannot be resolved, typically
        raise ToolRegistrationError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc


def _check_param(param: inspect.Parameter, name: str, hints: dict[str, Any]) -> None:
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        star = "*" if param.kind is param.VAR_POSITIONAL else "**"
        raise ToolRegistrationError(
            f"tool {name!r}: parameter {star}{param.name} is not allowed; a tool takes named "
            "arguments only (the model sends a JSON object)"
        )
    if param.kind is param.POSITIONAL_ONLY:
        raise ToolRegistrationError(
            f"tool {name!r}: parameter {param.name!r} is positional-only; tools are called with keyword arguments"
        )
    if param.name not in hints:
        raise ToolRegistrationError(f"tool {name!r}: parameter {param.name!r} has no type hint; the schema needs one")


def _field(param: inspect.Parameter, hint: Any) -> tuple[Any, FieldInfo]:
    default = param.default
    if isinstance(default, FieldInfo):
        # ``x: int = Field(5, description=...)``: keep the user's Field, add our alias around it.
        return typing.Annotated[hint, default], Field(alias=param.name)
    if default is inspect.Parameter.empty:
        return hint, Field(alias=param.name)
    return hint, Field(default, alias=param.name)


def _inline(node: Any, defs: dict[str, Any], seen: tuple[str, ...], name: str) -> Any:
    if isinstance(node, list):
        return [_inline(x, defs, seen, name) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        key = ref.rsplit("/", 1)[1]
        if key in seen:
            # A self-containing schema cannot be inlined, and the grammar builder cannot loop.
            raise ToolRegistrationError(f"tool {name!r}: recursive type {key!r} is not supported")
        out.update(_inline(defs[key], defs, seen + (key,), name))
    for key, value in node.items():
        if key in ("$ref", "$defs", "title"):
            continue
        if key == "properties" and isinstance(value, dict):
            # Keys here are field names (a field may be called "title"), not schema keywords.
            out[key] = {k: _inline(v, defs, seen, name) for k, v in value.items()}
        else:
            out[key] = _inline(value, defs, seen, name)
    return out


def _simplify_optional(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if not (isinstance(options, list) and "default" in schema and schema["default"] is None):
        return schema
    non_null = [o for o in options if o != {"type": "null"}]
    if len(non_null) != 1 or len(non_null) == len(options):
        return schema
    # Leaving the argument out already means None; showing "null" to a small model only invites
    # it to write null everywhere. Validation still accepts an explicit null.
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    return {**non_null[0], **rest}
