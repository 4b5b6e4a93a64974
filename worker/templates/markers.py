"""Untrusted-text markers: where message text landed in a rendered prompt.

Untrusted strings go into the template wrapped in two Unicode noncharacters (reserved for
internal use, never meaningful in text); after rendering, the markers show where message text
landed. Marker characters are removed from every input first, so content cannot fake them.
The engine tokenizes untrusted segments without special-token parsing, so a user who types
``<|im_end|>`` gets the characters, not the token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

OPEN_MARK = "\ufdd0"
CLOSE_MARK = "\ufdd1"
_MARK_SPLIT = re.compile(f"([{OPEN_MARK}{CLOSE_MARK}])")


def clean(text: str) -> str:
    """The text without marker characters."""
    # Checked first because almost no text has them and this runs on every string every render.
    if OPEN_MARK in text or CLOSE_MARK in text:
        return text.replace(OPEN_MARK, "").replace(CLOSE_MARK, "")
    return text


def mark(text: str) -> str:
    """Wrap untrusted text, leaving outer whitespace outside the markers.

    Templates strip content (llama2's ``content.strip()``, ``| trim``); with the whitespace
    outside, stripping still removes it, and whitespace is harmless as trusted text.
    """
    text = clean(text)
    core = text.strip()
    if not core:
        return text
    start = text.index(core[0])
    return f"{text[:start]}{OPEN_MARK}{core}{CLOSE_MARK}{text[start + len(core) :]}"


def mark_json(value: Any) -> Any:
    """Mark every string (keys too) inside a JSON-like value; numbers etc. are harmless."""
    if isinstance(value, str):
        return mark(value)
    if isinstance(value, Mapping):
        return {mark(str(k)): mark_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mark_json(v) for v in value]
    return value


# Strings a template may compare or look up (``"type": "function"``, ``"string"``, ``properties``,
# a tool's name): plain identifiers, which no control token is spelled as.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_$-]*")


def mark_spec(value: Any) -> Any:
    """Mark the caller's text inside tool specs (descriptions, property names, enum values...):
    every string, key or value, that is not a plain identifier, which stays as it is so that a
    template can still read ``tool.type`` or ``param.type``."""
    if isinstance(value, str):
        return value if _IDENTIFIER.fullmatch(value) else mark(value)
    if isinstance(value, Mapping):
        return {mark_spec(str(k)): mark_spec(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mark_spec(v) for v in value]
    return value


def clean_json(value: Any) -> Any:
    """Remove marker characters from every string of a trusted JSON-like value (tool specs)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, Mapping):
        return {clean(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def unmark(value: Any) -> Any:
    """The plain twin of a marked value: the same structure with the markers removed."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):  # only our own dicts get here: skip the slower ABC check
        return {unmark(k): unmark(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unmark(v) for v in value]
    return value


def segments(plain: str, marked: str) -> list[tuple[str, bool]]:
    """Cut the plain render into (piece, trusted) segments using the marked render.

    When the template treated marked text like plain text (the usual case) the markers give the
    exact split. When it did not (it sliced content and lost a marker, or branched on a
    ``startswith`` the marker changed), fall back to something coarse but safe: only the
    identical prefix before the first marker and suffix after the last one stay trusted.
    """
    exact = _split_balanced(marked)
    if exact is not None and "".join(piece for piece, _ in exact) == plain:
        return exact
    return _coarse_segments(plain, marked)


def checked_markup(marked: str, plain: str) -> str:
    """A format's rendering of marked input, if the markers came through intact; else the plain
    rendering marked as untrusted as a whole (a format that escaped or cut the markers)."""
    if _split_balanced(marked) is not None and clean(marked) == plain:
        return marked
    return mark(plain)


def _split_balanced(marked: str) -> list[tuple[str, bool]] | None:
    """Segments of a marked string, or None when its markers do not pair up."""
    found: list[tuple[str, bool]] = []
    depth = 0
    # The split alternates text, marker, text, marker, ... text.
    parts = _MARK_SPLIT.split(marked)
    for i in range(0, len(parts), 2):
        _append(found, parts[i], depth == 0)
        if i + 1 == len(parts):
            break
        if parts[i + 1] == OPEN_MARK:
            depth += 1
        elif depth == 0:
            return None
        else:
            depth -= 1
    return found if depth == 0 else None


def _append(found: list[tuple[str, bool]], piece: str, trusted: bool) -> None:
    """Add a piece, merging with the previous one when trust is the same; skip empties."""
    if not piece:
        return
    if found and found[-1][1] == trusted:
        found[-1] = (found[-1][0] + piece, trusted)
    else:
        found.append((piece, trusted))


def _coarse_segments(plain: str, marked: str) -> list[tuple[str, bool]]:
    positions = [i for i, ch in enumerate(marked) if ch in (OPEN_MARK, CLOSE_MARK)]
    if not positions:
        head, tail = marked, ""
    else:
        head, tail = marked[: positions[0]], marked[positions[-1] + 1 :]
    prefix = _common_prefix(plain, head)
    suffix = _common_prefix(plain[prefix:][::-1], tail[::-1])
    found: list[tuple[str, bool]] = []
    _append(found, plain[:prefix], True)
    _append(found, plain[prefix : len(plain) - suffix], False)
    _append(found, plain[len(plain) - suffix :], True)
    return found


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
