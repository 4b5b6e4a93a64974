"""The other ways Hermes-style models write a call, read only when they cannot be prose.

Models trained on Hermes tags do not always write ``<tool_call>{...}</tool_call>``. llama.cpp's
Hermes 2 Pro parser (common/chat.cpp) also reads what they write instead, and so does this module:

- ``<function=NAME>{args}</function>`` and ``<function name="NAME">{args}</function>``;
- call objects inside ``<tool>``, ``<tools>``, ``<response>``, ``<json>``, ``<xml>`` or
  ``<function_call>`` wrappers;
- call objects in a ```json or ```xml fence, bare or inside one of the tags above;
- call objects on their own lines at the end of the message (``trailing_calls``).

Each form counts only when every call in it names one of the offered tools and looks like a call,
not like a tool's definition echoed back: anything else stays content, untouched. Strings inside
the JSON are read by worker/jsonish.py, which never rewrites them.
"""

from __future__ import annotations

import re
from typing import Any

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.common import call_from_value

WRAPPERS = ("tool", "tools", "response", "json", "xml", "function_call")
# Where a lenient form may start: a wrapper tag, a function tag or a code fence.
START = re.compile(r"<(?:" + "|".join(WRAPPERS) + r")>|<function[= ]|```")
_FUNCTION_EQ = re.compile(r"<function=([^\s<>]{1,256})>")
_FUNCTION_NAME = re.compile(r'<function\s+name="([^"<>]{1,256})"\s*>')
_FENCE = re.compile(r"```(?:json|xml|JSON|XML)?[ \t]*\n?")
# Keys a call object may carry (a tool definition has "description" too: that is an echo).
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments", "parameters"})

# (calls, where the form ends)
Found = tuple[list[ToolCall], int]


def read_at(text: str, i: int, tool_names: set[str]) -> Found | None:
    """The calls of the lenient form starting at text[i] (a START match), or None when what is
    there is not such a call (then it is content)."""
    if text.startswith("```", i):
        return _fenced(text, i, tool_names)
    for tag in WRAPPERS:
        opener = f"<{tag}>"
        if text.startswith(opener, i):
            return _wrapped(text, i + len(opener), f"</{tag}>", tool_names)
    return read_function(text, i, tool_names)


def read_function(text: str, i: int, tool_names: set[str]) -> Found | None:
    """``<function=NAME>{args}</function>`` or ``<function name="NAME">{args}</function>`` at i."""
    m = _FUNCTION_EQ.match(text, i) or _FUNCTION_NAME.match(text, i)
    if m is None or m.group(1) not in tool_names:
        return None
    j = _skip_ws(text, m.end())
    close = "</function>"
    if text.startswith(close, j):
        args: Any = {}
    else:
        found = _json_at(text, j)
        if found is None:
            return None
        args, j = found
    end = _expect(text, _skip_ws(text, j), close)
    if end is None or not isinstance(args, dict):
        return None
    call = call_from_value({"name": m.group(1), "arguments": args}, 1)
    return ([call], end) if isinstance(call, ToolCall) else None


def trailing_calls(text: str, tool_names: set[str] | None) -> tuple[str, list[ToolCall]] | None:
    """Call objects (bare or fenced) that end the message, each starting its own line: the text
    before them and the calls, or None. A whole message of calls is the case with no text."""
    if not tool_names:
        return None
    for m in re.finditer(r"(?m)^[ \t]*(?=[{\[]|```)", text):
        found = _values_to_end(text, m.end(), tool_names)
        if found is not None:
            return text[: m.start()], found
    return None


# ---------------------------------------------------------------- the forms


def _fenced(text: str, i: int, tool_names: set[str]) -> Found | None:
    fence = _FENCE.match(text, i)
    if fence is None:  # pragma: no cover - START only matches at a fence
        return None
    j = _skip_ws(text, fence.end())
    inner = _tagged_inside(text, j, tool_names)
    if inner is None:
        found = _json_at(text, j)
        if found is None:
            return None
        calls = plausible_calls(found[0], tool_names)
        if calls is None:
            return None
        inner = (calls, found[1])
    end = _expect(text, _skip_ws(text, inner[1]), "```")
    return None if end is None else (inner[0], end)


def _tagged_inside(text: str, j: int, tool_names: set[str]) -> Found | None:
    """A ``<tool_call>``, wrapper or function tag at j (inside a fence)."""
    for tag in ("tool_call", *WRAPPERS):
        opener = f"<{tag}>"
        if text.startswith(opener, j):
            return _wrapped(text, j + len(opener), f"</{tag}>", tool_names)
    return read_function(text, j, tool_names)


def _wrapped(text: str, j: int, close: str, tool_names: set[str]) -> Found | None:
    """Calls after a wrapper tag: a function tag or call JSON (maybe fenced), then ``close``."""
    j = _skip_ws(text, j)
    fence = _FENCE.match(text, j)
    fenced = fence is not None
    if fence is not None:
        j = _skip_ws(text, fence.end())
    if text.startswith("<function", j):
        found = read_function(text, j, tool_names)
        if found is None:
            return None
        calls, j = found
    else:
        value = _json_at(text, j)
        if value is None:
            return None
        plausible = plausible_calls(value[0], tool_names)
        if plausible is None:
            return None
        calls, j = plausible, value[1]
    j = _skip_ws(text, j)
    if fenced:
        after_fence = _expect(text, j, "```")
        if after_fence is None:
            return None
        j = _skip_ws(text, after_fence)
    end = _expect(text, j, close)
    return None if end is None else (calls, end)


def _values_to_end(text: str, j: int, tool_names: set[str]) -> list[ToolCall] | None:
    """Calls from j to the end of the text: JSON values or fenced ones, separated by whitespace."""
    calls: list[ToolCall] = []
    j = _skip_ws(text, j)
    while j < len(text):
        if text.startswith("```", j):
            found = _fenced(text, j, tool_names)
            if found is None:
                return None
            calls.extend(found[0])
            j = found[1]
        else:
            value = _json_at(text, j)
            if value is None:
                return None
            plausible = plausible_calls(value[0], tool_names)
            if plausible is None:
                return None
            calls.extend(plausible)
            j = value[1]
        j = _skip_ws(text, j)
    return calls or None


def plausible_calls(value: Any, tool_names: set[str]) -> list[ToolCall] | None:
    """The calls in a decoded value, if every one of them is a call of an offered tool."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for n, item in enumerate(items, 1):
        if not _looks_like_a_call(item, tool_names):
            return None
        call = call_from_value(item, n)
        if not isinstance(call, ToolCall):
            return None
        calls.append(call)
    return calls or None


def _looks_like_a_call(item: Any, tool_names: set[str]) -> bool:
    if not isinstance(item, dict) or not set(item) <= _CALL_KEYS:
        return False
    inner = item.get("function")
    if isinstance(inner, dict):
        if not set(inner) <= _FUNCTION_KEYS:
            return False
        item = inner
    args = item.get("arguments", item.get("parameters"))
    if isinstance(args, dict) and args.get("type") == "object" and isinstance(args.get("properties"), dict):
        return False  # a parameters schema: a tool's definition, not a call
    return isinstance(item.get("name"), str) and item["name"].strip() in tool_names


# ---------------------------------------------------------------- small readers


def _json_at(text: str, j: int) -> tuple[Any, int] | None:
    """The complete JSON value starting at j and where it ends, or None."""
    if j >= len(text) or text[j] not in "{[":
        return None
    scan = jsonish.scan_value(text, j)
    if scan.end is None:
        return None
    try:
        return jsonish.loads(text[j : scan.end]), scan.end
    except jsonish.JsonishError:
        return None


def _expect(text: str, j: int, token: str) -> int | None:
    """Past ``token`` at j; the end of the text also ends a form (an output cut before its close)."""
    if text.startswith(token, j):
        return j + len(token)
    return j if j >= len(text) else None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i
