"""A caller's regex runs on RE2 (google-re2), in time linear in its input, never on Python's
backtracking ``re``: a ``pattern`` such as ``^(a+)+$`` would otherwise stall whoever checks it.

``Re2Draft202012Validator`` is jsonschema's Draft 2020-12 validator with every keyword that
searches a caller's regex (``pattern``, ``patternProperties``, ``additionalProperties`` beside
``patternProperties``, the ``regex`` format) answered by RE2. ``unevaluatedProperties`` beside
``patternProperties`` would search with ``re`` inside jsonschema, so such a schema is refused at
admission (toolq/schema_bounds.py), like a pattern RE2 cannot compile.

google-re2 comes with the gateway and worker extras, not with the core package: without it a
pattern is never searched at all; a value checked against one fails with a message saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

try:
    import re2
except ImportError:  # the core package alone (pip install toolq): see the module's docstring
    re2 = None

__all__ = ["RE2_MISSING", "Re2Draft202012Validator", "pattern_problem", "re2_validator", "search"]

if re2 is not None:
    _OPTIONS = re2.Options()
    _OPTIONS.log_errors = False  # a caller's bad pattern is answered, not logged by the C++ library

RE2_MISSING = "checking a pattern needs google-re2 (pip install 'toolq[worker]' or 'toolq[gateway]')"


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    if re2 is None:
        raise ValueError(RE2_MISSING)
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(
            f"is not a pattern RE2 can run ({why}); lookaround and backreferences are not supported"
        ) from None


def pattern_problem(pattern: str) -> str | None:
    """Why RE2 cannot run ``pattern``, or None (also None where google-re2 is not installed:
    the worker, which has it, then reports the pattern when it checks a value)."""
    if re2 is None:
        return None
    try:
        _compiled(pattern)
    except ValueError as e:
        return str(e)
    return None


def search(pattern: str, text: str) -> bool:
    """``re.search`` on RE2; ValueError when RE2 cannot run the pattern (or is not installed)."""
    return _compiled(pattern).search(text) is not None


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
            yield ValidationError(f"a patternProperties pattern {RE2_MISSING if re2 is None else 'cannot run'}")
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
        _compiled(instance)
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
