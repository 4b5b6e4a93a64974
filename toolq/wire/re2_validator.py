"""jsonschema's Draft 2020-12 validator with every keyword that searches a caller's regex
(``pattern``, ``patternProperties``, ``additionalProperties`` beside ``patternProperties``, the
``regex`` format) answered by RE2 (toolq/wire/patterns.py). ``unevaluatedProperties`` beside
``patternProperties`` would search with ``re`` inside jsonschema, so such a schema is refused at
admission (toolq/wire/schema_bounds.py), like a pattern RE2 cannot compile.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from toolq.wire.patterns import HAVE_RE2, RE2_MISSING, compiled, search

__all__ = ["Re2Draft202012Validator", "re2_validator"]


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        if not search(pattern, instance):
            yield ValidationError(f"{instance!r} does not match {pattern!r}")
    except ValueError as e:
        yield ValidationError(f"the pattern {pattern!r} {e}")


def _matching(schema: dict[str, Any], key: str) -> list[str] | None:
    """The patternProperties patterns ``key`` matches; None when one of them cannot run."""
    try:
        return [p for p in schema.get("patternProperties", {}) if search(p, key)]
    except ValueError:
        return None


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                found = search(pattern, key)
            except ValueError as e:
                yield ValidationError(f"the pattern {pattern!r} {e}")
                return
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_ADDITIONAL = Draft202012Validator.VALIDATORS["additionalProperties"]


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if "patternProperties" not in schema:  # jsonschema's own searches no regex then
        yield from _ADDITIONAL(validator, extra, instance, schema)
        return
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = []
    for key in instance:
        matched = _matching(schema, key)
        if matched is None:
            yield ValidationError(f"a patternProperties pattern {'cannot run' if HAVE_RE2 else RE2_MISSING}")
            return
        if key not in properties and not matched:
            extras.append(key)
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif extra is False and extras:
        keys = ", ".join(repr(k) for k in sorted(extras))
        yield ValidationError(f"{keys} do not match any of the regexes: {', '.join(schema['patternProperties'])}")


def _is_regex(instance: object) -> bool:
    if isinstance(instance, str):
        compiled(instance)
    return True


def _re2_formats() -> FormatChecker:
    checker = FormatChecker()  # its own copy of every format jsonschema checks
    checker.checks("regex", raises=ValueError)(_is_regex)
    return checker


Re2Draft202012Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


_FORMATS = _re2_formats()


def re2_validator(schema: dict[str, Any]) -> Any:
    """A validator of ``schema`` that runs its regexes on RE2, with the formats jsonschema checks."""
    return Re2Draft202012Validator(schema, format_checker=_FORMATS)
