"""How deep a JSON value nests, found without recursion and in time linear in its size.

Python's ``json`` recurses once per level until its recursion limit, pydantic refuses JSON nested
deeper than about 200 levels, and an error message that quotes a deep input can recurse again
(DESIGN.md, "Facts for hostile input"). A request that nests past ``MAX_JSON_DEPTH`` is refused
at the door, naming the field and the depth (gateway/json_door.py for raw bodies, the protocol's
validators for values built in Python, tool-call arguments before they are parsed), so no
request is accepted that a worker could not read back.
"""

from __future__ import annotations

import os
import re
import time
from functools import lru_cache
from itertools import accumulate
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "TooDeep", "check_depth", "check_text_depth", "dotted", "max_json_depth", "text_depth"]

# A tool's parameters may nest TOOLQ_SCHEMA_MAX_DEPTH (64) levels, inside a body that wraps it in
# about five; pydantic refuses past about 200 levels, so anything accepted here can be read back.
MAX_JSON_DEPTH = 100


@lru_cache(maxsize=1)
def max_json_depth() -> int:
    """TOOLQ_MAX_JSON_DEPTH, read by hand as the schema limits are (toolq/wire/schema_bounds.py): the
    protocol's leaf imports no settings. Above 150 it could admit what pydantic cannot read back."""
    value = int(os.environ.get("TOOLQ_MAX_JSON_DEPTH", MAX_JSON_DEPTH))
    if not 8 <= value <= 150:
        raise ValueError(f"TOOLQ_MAX_JSON_DEPTH={value}: give a depth from 8 to 150")
    return value


class TooDeep(ValueError):
    """A value nested past the bound: ``path`` is where it first went past it, ``field`` the
    request's field that holds it, ``depth`` how deep it goes in all."""

    def __init__(self, path: list[str | int], depth: int, limit: int):
        self._made_of = (path, depth, limit)
        self.field = dotted(path[:1]) or "the body"
        self.path = _shortened(dotted(path))
        self.depth = depth
        self.limit = limit
        super().__init__(
            f"{self.field} nests {depth} levels deep, above the limit of {limit} (TOOLQ_MAX_JSON_DEPTH)"
            + (f"; it passes the limit at {self.path}" if self.path != self.field else "")
        )

    def __reduce__(self) -> tuple[type[TooDeep], tuple[list[str | int], int, int]]:
        return TooDeep, self._made_of  # it crosses back from the gateway's check process


def dotted(path: list[str | int]) -> str:
    """['metadata', 'a', 0] -> 'metadata.a[0]'."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _shortened(text: str, keep: int = 120) -> str:
    return text if len(text) <= keep else f"{text[: keep // 2]}…{text[-keep // 2 :]}"


def check_depth(value: Any, limit: int | None = None, *, at: str = "") -> None:
    """TooDeep when ``value`` (dicts and lists) nests more than ``limit`` levels; the path
    starts at ``at``."""
    limit = limit or max_json_depth()
    root: list[str | int] = [at] if at else []
    stack: list[tuple[Any, list[str | int], int]] = [(value, root, 1)]
    deepest, where = 0, root
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        if depth > deepest:
            deepest = depth
            if depth == limit + 1:
                where = path
        for key, child in items:
            if isinstance(child, (dict, list)):
                stack.append((child, [*path, key], depth + 1))
    if deepest > limit:
        raise TooDeep(where, deepest, limit)


# A JSON string, unrolled so that the regex engine runs through plain characters without backtracking
_STRING_B = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# Brackets to +1 and -1 (as signed bytes), everything else dropped: the running sum is the depth.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
# A JSON text's strings (skipped whole), brackets and commas, to find where it nests too deep.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.S)


_SLICE = 1 << 17  # brackets summed per step: each C call holds the GIL briefly


def text_depth(text: str | bytes) -> int:
    """How deep a JSON text nests. Linear, and every step runs in C (a regex, a translate, an
    accumulate): about 20 to 40 ms for a 1 MiB body on this project's CPU, whatever its shape. Run
    in a thread beside an event loop, it gives the GIL up between steps (``time.sleep(0)``), so the
    loop waits for one step at most, not the whole scan."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if raw.count(b"[") + raw.count(b"{") == 0:
        return 0
    stripped = _STRING_B.sub(b"", raw)
    time.sleep(0)
    steps = stripped.translate(_STEPS, _NOT_BRACKETS)
    deepest = depth = 0
    for at in range(0, len(steps), _SLICE):
        piece = steps[at : at + _SLICE]
        deepest = max(deepest, max(accumulate(memoryview(piece).cast("b"), initial=depth)))
        depth += piece.count(1) - piece.count(255)
        time.sleep(0)
    return deepest


def check_text_depth(text: str | bytes, limit: int | None = None, *, at: str = "") -> None:
    """TooDeep when the JSON text nests more than ``limit`` levels, without parsing it (a text that
    is not JSON is left to the parser, which says so), naming the keys and indexes down to where
    the bound was passed."""
    limit = limit or max_json_depth()
    deepest = text_depth(text)
    if deepest > limit:
        raise TooDeep(_where_deeper(text, limit, [at] if at else []), deepest, limit)


def _where_deeper(text: str | bytes, limit: int, path: list[str | int]) -> list[str | int]:
    """The path to the first container past ``limit`` levels; only a refused text pays for it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    cur: list[str | int | None] = []  # per open level: the key (object) or index (array) next
    for m in _TOKENS.finditer(text):
        tok = m.group()
        c = tok[0]
        if c == '"':
            if cur and cur[-1] is None:  # in an object, before its colon: a key
                cur[-1] = tok[1:-1]
        elif c in "{[":
            if cur:
                path.append(cur[-1] if cur[-1] is not None else "?")
            cur.append(None if c == "{" else 0)
            if len(cur) > limit:
                return path
        elif c in "}]":
            if cur:
                cur.pop()
                if cur:
                    path.pop()
        elif c == "," and cur:
            last = cur[-1]
            cur[-1] = last + 1 if isinstance(last, int) else None
    return path
