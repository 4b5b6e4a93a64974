"""Lenient JSON reading for model output, shared by every tool-call format.

Models write JSON that is almost right: Python literals (single quotes, True/None), trailing
commas, a ```json fence. The rule here is that the inside of a string is never rewritten: every
repair works on the text *between* strings, so "True story", "a, }b" or "AT&amp;T" come through
byte for byte. Order: strict json, then Python literals (ast.literal_eval, which only evaluates
literals and is safe on untrusted text), then narrow repairs outside strings, then both again.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

_QUOTES = "\"'"
_OPEN = "{["
_CLOSE = "}]"


class JsonishError(ValueError):
    """The text is not JSON even after lenient reading; str() is a message a model can act on."""


def string_end(text: str, i: int) -> int | None:
    """Index just past the string literal opening at text[i] (a quote), or None if unterminated.

    A backslash always escapes the next character, in JSON and in Python literals alike.
    """
    quote = text[i]
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
        elif c == quote:
            return j + 1
        else:
            j += 1
    return None


def split_strings(text: str) -> Iterator[tuple[bool, str]]:
    """Yield (is_string, chunk) pieces of text; an unterminated string runs to the end."""
    pos = 0
    i = 0
    n = len(text)
    while i < n:
        if text[i] in _QUOTES:
            end = string_end(text, i)
            end = n if end is None else end
            if i > pos:
                yield False, text[pos:i]
            yield True, text[i:end]
            pos = i = end
        else:
            i += 1
    if pos < n:
        yield False, text[pos:]


@dataclass
class Scan:
    """Where a JSON value that starts at ``start`` ends.

    ``end`` is set when the brackets balance; ``stopped_at`` when one of the stop strings
    appeared outside a string first; neither when the text ran out (the value is truncated).
    """

    start: int
    end: int | None = None
    stopped_at: int | None = None
    stop: str | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None


def scan_value(text: str, start: int, stops: Sequence[str] = ()) -> Scan:
    """Find the end of the object or array opening at text[start], tracking strings and depth.

    A ``}`` or a closing tag inside a string value does not end anything; a stop string (say
    ``</tool_call>``) met outside strings before the brackets balance means the JSON is broken
    and the caller should fall back to the tag. Brackets are counted, not matched by kind: the
    parser proper reports a mismatch with a better message than we could.
    """
    scan = Scan(start)
    depth = 0
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c in _QUOTES:
            end = string_end(text, i)
            if end is None:
                return scan
            i = end
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth <= 0:
                scan.end = i + 1
                return scan
        elif c == "<":
            for stop in stops:
                if text.startswith(stop, i):
                    scan.stopped_at, scan.stop = i, stop
                    return scan
        i += 1
    return scan


_FENCE_OPEN = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n?")


def strip_fence(text: str) -> str:
    """The inside of a ```json ... ``` fence that wraps the whole (stripped) text, else the text."""
    s = text.strip()
    m = _FENCE_OPEN.match(s)
    if not m:
        return s
    inner = s[m.end() :]
    if inner.rstrip().endswith("```"):
        inner = inner.rstrip()[:-3]
    return inner.strip()


# ---------------------------------------------------------------- lenient loads

_TRAILING_COMMA = re.compile(r",(\s*)(?=[}\]])")
# Bare words outside strings that JSON and Python spell differently.
_TO_PYTHON = {"true": "True", "false": "False", "null": "None"}
_WORD = re.compile(r"\b(true|false|null)\b")


def _outside_strings(text: str, fix) -> str:
    return "".join(chunk if is_str else fix(chunk) for is_str, chunk in split_strings(text))


def _drop_trailing_commas(text: str) -> str:
    return _outside_strings(text, lambda chunk: _TRAILING_COMMA.sub(r"\1", chunk))


def _json_like(value: Any, depth: int = 0) -> Any:
    """Keep only what JSON can carry: literal_eval also builds tuples, sets, bytes and complex
    numbers, and both parsers accept NaN and Infinity, which the wire format cannot hold."""
    if depth > 200:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value} is not a JSON number")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_like(v, depth + 1) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"object key {k!r} is not a string")
            out[k] = _json_like(v, depth + 1)
        return out
    raise ValueError(f"{type(value).__name__} is not a JSON type")


def _python_literal(text: str) -> Any:
    source = _outside_strings(text, lambda chunk: _WORD.sub(lambda m: _TO_PYTHON[m.group(1)], chunk))
    with warnings.catch_warnings():
        # "\_" and friends are invalid escapes that Python warns about; they are kept literally.
        warnings.simplefilter("ignore")
        return _json_like(ast.literal_eval(source.strip()))


def _attempts(text: str) -> Iterator[Any]:
    yield lambda: _json_like(json.loads(text, strict=False))  # strict=False: raw newlines in strings
    yield lambda: _python_literal(text)
    repaired = _drop_trailing_commas(text)
    if repaired != text:
        yield lambda: _json_like(json.loads(repaired, strict=False))
        yield lambda: _python_literal(repaired)


def loads(text: str) -> Any:
    """Read JSON leniently; raise JsonishError with the strict parser's message on failure."""
    if not isinstance(text, str):
        raise JsonishError(f"expected text, got {type(text).__name__}")
    if not text.strip():
        raise JsonishError("it is empty")
    first_error: str | None = None
    for attempt in _attempts(text):
        try:
            return attempt()
        except json.JSONDecodeError as e:
            first_error = first_error or f"{e.msg} at line {e.lineno} column {e.colno}"
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
            # ValueError also covers Python's limit on very long integer literals.
            first_error = first_error or str(e) or type(e).__name__
    raise JsonishError(first_error or "it is not valid JSON")


def dumps(value: Any) -> str:
    """Compact JSON as models write it (spaces after separators, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False)
