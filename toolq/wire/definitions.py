"""A tool definition as the wire and the model see it: its name rule, its ``parameters`` checked as
a JSON Schema, and the OpenAI function spec it is shown as. The protocol checks a caller's
definitions with it, and the tool package builds its specs with it, so it imports nothing of the
house.

The schema is checked with jsonschema's Draft 2020-12 metaschema, not by hand. What a grammar
cannot express (``minimum``, ``pattern``, ``format``, ...) is still enforced: the arguments the
model wrote are validated against the whole schema after generation (``toolq/tools/schema_tool.py``).
Only what could never be enforced here is refused: a ``$ref`` that points outside the schema,
which would need a network fetch, and a schema past the bounds of toolq/wire/schema_bounds.py, whose
grammar or checks would cost more than a worker can spare.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import lru_cache
from importlib.util import find_spec
from typing import Any

from toolq.wire.limits import MAX_SCHEMA_BYTES
from toolq.wire.schema_bounds import SchemaTooLarge, check_schema_bounds

__all__ = ["NAME_RE", "check_bounds", "check_parameters", "check_tool_name", "function_spec", "metaschema_error"]

# OpenAI's rule for function names; it also keeps names safe inside GBNF string literals.
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def function_spec(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI function spec the model is shown; a fresh copy, so callers may mutate it."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": copy.deepcopy(parameters)},
    }


def check_tool_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(f"tool name {name!r} is invalid: use 1-64 letters, digits, '_' or '-'")
    return name


def metaschema_error(schema: dict[str, Any]) -> tuple[str, str] | None:
    """Where (a JSON pointer's parts joined by '/', or '(root)') and why the schema breaks Draft
    2020-12's metaschema; None when it does not. Also None where jsonschema is not installed: the
    light client (pyproject.toml) leaves this check to the gateway and the store's Redis mode,
    whose extras install it."""
    if find_spec("jsonschema") is None:
        return None
    return _metaschema_problem(json.dumps(schema, sort_keys=True, separators=(",", ":")))


def check_parameters(name: str, schema: Any) -> dict[str, Any]:
    """The schema, when it is a valid JSON Schema for an arguments object; ValueError naming the
    tool and the problem otherwise."""
    if not isinstance(schema, dict):
        raise ValueError(f"tool {name!r}: parameters must be a JSON Schema object, not {type(schema).__name__}")
    size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"tool {name!r}: parameters is {size} bytes of JSON, above the limit of {MAX_SCHEMA_BYTES}")
    check_bounds(schema, f"tool {name!r}: parameters")  # before the metaschema, which recurses without a bound
    broken = metaschema_error(schema)
    if broken is not None:
        where, why = broken
        raise ValueError(f"tool {name!r}: parameters is not a valid JSON Schema at {where}: {why}")
    kind = schema.get("type", "object")
    if kind != "object":
        raise ValueError(f'tool {name!r}: parameters must describe an object ("type": "object"), not {kind!r}')
    for ref in _refs(schema):
        if not ref.startswith("#"):
            raise ValueError(
                f"tool {name!r}: $ref {ref!r} points outside the schema; only local references (#/...) are supported"
            )
    return schema


def check_bounds(schema: Any, what: str) -> None:
    """ValueError naming the field, e.g. ``tool 'f': parameters.properties.x.minLength is ...``,
    when the schema passes a bound of toolq/wire/schema_bounds.py."""
    try:
        check_schema_bounds(schema)
    except SchemaTooLarge as e:
        raise ValueError(f"{what}.{e}" if e.path else f"{what}: {e}") from None


@lru_cache(maxsize=1024)
def _metaschema_problem(schema_json: str) -> tuple[str, str] | None:
    """``metaschema_error`` of one schema's canonical JSON. The check costs about 1 ms per
    subschema (jsonschema's 2020-12 metaschema), and callers send the same tools again and again,
    so each distinct schema is checked once per process."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except SchemaError as e:
        return "/".join(str(p) for p in e.absolute_path) or "(root)", e.message
    return None


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)
