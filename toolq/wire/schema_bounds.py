"""The work a caller's JSON Schema may ask for, bounded before any of it runs.

A worker turns a tool's ``parameters`` (and a response format's schema) into a grammar with
llama.cpp's converter, which writes a bounded repetition out one element at a time: a
``minLength`` in the hundreds of millions grew a worker to 23.9 GB (DESIGN.md, "Facts for hostile
input"). So every count the converter expands (string lengths, item counts, ``{n,m}`` in a
pattern), and what else grows with the caller's numbers (enum sizes, nesting, ``$ref``s, pattern
length), is held to ``SchemaLimits`` here, where every door's request is
validated (toolq/wire/definitions.py). A schema past a bound is refused with its field path, e.g.
``properties.x.minLength``; the worker still builds each grammar within a budget of its own
(worker/grammar/budget.py) for what the bounds let through.

Patterns are checked with RE2 where google-re2 is installed (the gateway and worker extras): a
pattern RE2 cannot compile is refused here, because the worker validates arguments with RE2 only
(toolq/wire/patterns.py), never with Python's backtracking ``re``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from toolq.wire.patterns import pattern_problem

__all__ = [
    "SchemaLimits",
    "SchemaTooLarge",
    "check_request_subschemas",
    "check_schema_bounds",
    "count_objects",
    "group_nesting",
    "pattern_repetitions",
    "quantifiers",
    "schema_limits",
]


class SchemaLimits(BaseModel):
    """The bounds, from the environment (TOOLQ_SCHEMA_*). The gateway, the SDK and the workers each
    read them where they validate a request: give them the same values. Read by hand rather than
    with pydantic-settings: the protocol's leaf may not import toolq/settings.py, and the light
    client, which validates requests with it too, does not install pydantic-settings
    (pyproject.toml)."""

    # minLength, maxLength, minItems, maxItems and a pattern's {n,m}: the converter writes each
    # out one grammar element at a time
    max_repeat: int = Field(default=1000, ge=1)
    max_repeat_total: int = Field(default=8000, ge=1)  # the sum of them over one schema
    max_enum: int = Field(default=500, ge=1)  # values of one enum (OpenAI's structured outputs allow 500)
    max_depth: int = Field(default=64, ge=4)  # nested JSON objects and arrays in one schema
    max_refs: int = Field(default=256, ge=0)  # $refs in one schema
    max_pattern: int = Field(default=1000, ge=1)  # characters of one pattern (or patternProperties key)
    max_pattern_nesting: int = Field(default=32, ge=1)  # groups inside groups in one pattern
    # JSON objects in one schema, and in all the tool schemas of one request: the metaschema check
    # costs about 0.2 ms each and the grammar a rule each, so the checks and the build stay linear
    # in what is allowed (DESIGN.md, "Facts for isolation")
    max_subschemas: int = Field(default=1000, ge=1)
    max_request_subschemas: int = Field(default=2000, ge=1)


@lru_cache(maxsize=1)
def schema_limits() -> SchemaLimits:
    """The limits from the environment, read once per process."""
    given = {name: os.environ.get(f"TOOLQ_SCHEMA_{name.upper()}") for name in SchemaLimits.model_fields}
    return SchemaLimits.model_validate({name: value for name, value in given.items() if value is not None})


_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
_DATA = ("const", "enum", "default", "examples")  # values, not schemas: never read as keywords
# {n}, {n,} and {n,m} in a pattern: the converter writes each one out like a length bound
_QUANTIFIER = re.compile(r"(?<!\\)\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


class SchemaTooLarge(ValueError):
    """A schema past one of the bounds; ``path`` is where, e.g. ``properties.x.minLength``."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path} {message}" if path else message)
        self.path = path


def check_schema_bounds(schema: Any, limits: SchemaLimits | None = None) -> None:
    """Raise SchemaTooLarge at the first bound ``schema`` passes."""
    limits = limits or schema_limits()
    total = 0
    refs = 0
    objects = 1 if isinstance(schema, dict) else 0
    for path, key, value in _walk(schema, (), limits):
        where = _dotted((*path, key))
        if key not in _DATA and isinstance(value, (dict, list)):
            objects += 1 if isinstance(value, dict) else sum(isinstance(v, dict) for v in value)
            if objects > limits.max_subschemas:
                raise SchemaTooLarge(
                    where,
                    f"brings the schema to {objects} JSON objects (subschemas), above the limit of "
                    f"{limits.max_subschemas} in one schema (TOOLQ_SCHEMA_MAX_SUBSCHEMAS)",
                )
        if key in _COUNTS and _is_number(value):
            count = int(value)
            _at_most(where, count, limits.max_repeat, "TOOLQ_SCHEMA_MAX_REPEAT")
            total += count
        elif key == "enum" and isinstance(value, list):
            _at_most(where, len(value), limits.max_enum, "TOOLQ_SCHEMA_MAX_ENUM", "values")
        elif key == "$ref":
            refs += 1
            _at_most(where, refs, limits.max_refs, "TOOLQ_SCHEMA_MAX_REFS", "$refs in all")
        elif key == "pattern" and isinstance(value, str):
            total += _check_pattern(where, value, limits)
        elif key == "patternProperties" and isinstance(value, dict):
            for pattern in value:
                total += _check_pattern(f"{where}[{pattern!r}]", pattern, limits)
        elif key == "unevaluatedProperties" and _has_pattern_properties(schema):
            # jsonschema would search patternProperties with Python's re for it (toolq/wire/patterns.py)
            raise SchemaTooLarge(where, "cannot be checked beside patternProperties; use additionalProperties")
        if total > limits.max_repeat_total:
            raise SchemaTooLarge(
                where,
                f"brings the schema's repetitions (lengths, item counts, pattern quantifiers) to {total}, "
                f"above the limit of {limits.max_repeat_total} in all (TOOLQ_SCHEMA_MAX_REPEAT_TOTAL)",
            )


def _walk(
    node: Any, path: tuple[str | int, ...], limits: SchemaLimits
) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """(path of the object, key, value) for every key of every object in the schema, depth first."""
    if len(path) > limits.max_depth:
        raise SchemaTooLarge(
            _dotted(path), f"nests deeper than the limit of {limits.max_depth} levels (TOOLQ_SCHEMA_MAX_DEPTH)"
        )
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            if key not in _DATA:
                yield from _walk(value, (*path, key), limits)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*path, i), limits)


def _check_pattern(where: str, pattern: str, limits: SchemaLimits) -> int:
    """Check one caller's regex; return the repetitions its quantifiers ask for."""
    _at_most(where, len(pattern), limits.max_pattern, "TOOLQ_SCHEMA_MAX_PATTERN", "characters long")
    _at_most(
        where, group_nesting(pattern), limits.max_pattern_nesting, "TOOLQ_SCHEMA_MAX_PATTERN_NESTING", "groups deep"
    )
    total = 0
    for text, count in quantifiers(pattern):
        _at_most(f"{where} ({text})", count, limits.max_repeat, "TOOLQ_SCHEMA_MAX_REPEAT")
        total += count
    problem = pattern_problem(pattern)
    if problem:
        raise SchemaTooLarge(where, problem)
    return total


def group_nesting(pattern: str) -> int:
    """How deep a pattern's groups nest (escaped parentheses and those in a character class do not
    count): Python's ``re``, which jsonschema's metaschema uses to check a pattern, recurses once
    per level."""
    deepest = depth = 0
    escaped = in_class = False
    for c in pattern:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(depth - 1, 0)
    return deepest


def count_objects(schemas: list[Any], cap: int) -> int:
    """The JSON objects in ``schemas`` (values under ``const``, ``enum``... are data, not counted),
    counted without recursion up to ``cap``: bounded whatever the schemas hold."""
    count = 0
    stack = list(schemas)
    while stack and count < cap:
        node = stack.pop()
        if isinstance(node, dict):
            count += 1
            stack.extend(v for k, v in node.items() if k not in _DATA)
        elif isinstance(node, list):
            stack.extend(node)
    return count


def check_request_subschemas(schemas: list[Any], limits: SchemaLimits | None = None) -> None:
    """Raise SchemaTooLarge when the tool schemas of one request hold more JSON objects in all than
    ``max_request_subschemas``; run before any schema is checked one by one."""
    limit = (limits or schema_limits()).max_request_subschemas
    if count_objects(schemas, limit + 1) > limit:
        raise SchemaTooLarge(
            "",
            f"the tools' schemas hold more than {limit} JSON objects (subschemas) in all, above the "
            "limit for one request (TOOLQ_SCHEMA_MAX_REQUEST_SUBSCHEMAS)",
        )


def quantifiers(pattern: str) -> list[tuple[str, int]]:
    """Each ``{n}``, ``{n,}``, ``{n,m}`` of a pattern with the count the converter writes out."""
    return [(m.group(0), max(int(m.group(1) or 0), int(m.group(2) or 0))) for m in _QUANTIFIER.finditer(pattern)]


def pattern_repetitions(pattern: str) -> int:
    """The elements a pattern's quantifiers make the converter write, in all."""
    return sum(count for _, count in quantifiers(pattern))


def _has_pattern_properties(node: Any) -> bool:
    if isinstance(node, dict):
        return "patternProperties" in node or any(_has_pattern_properties(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_pattern_properties(v) for v in node)
    return False


def _at_most(where: str, value: int, limit: int, setting: str, unit: str = "") -> None:
    if value > limit:
        what = f"{value} {unit}".strip() if unit else str(value)
        raise SchemaTooLarge(where, f"is {what}, above the limit of {limit} ({setting})")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < 1e300


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out
