"""A caller's regex runs on RE2 (google-re2), in time linear in its input, never on Python's
backtracking ``re``: a ``pattern`` such as ``^(a+)+$`` would otherwise stall whoever checks it.
The schema validator that searches with it is toolq/wire/re2_validator.py; this module needs no
jsonschema, so the protocol's bounds (toolq/wire/schema_bounds.py) can use it in the light client.

google-re2 comes with the gateway and worker extras, not with the core package: without it a
pattern is never searched at all; a value checked against one fails with a message saying so.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

try:
    import re2
except ImportError:  # the core package alone (pip install toolq): see the module's docstring
    re2 = None

__all__ = ["HAVE_RE2", "RE2_MISSING", "compiled", "pattern_problem", "search"]

HAVE_RE2 = re2 is not None

if re2 is not None:
    _OPTIONS = re2.Options()
    _OPTIONS.log_errors = False  # a caller's bad pattern is answered, not logged by the C++ library

RE2_MISSING = "checking a pattern needs google-re2 (pip install 'toolq[worker]' or 'toolq[gateway]')"


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
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
        compiled(pattern)
    except ValueError as e:
        return str(e)
    return None


def search(pattern: str, text: str) -> bool:
    """``re.search`` on RE2; ValueError when RE2 cannot run the pattern (or is not installed)."""
    return compiled(pattern).search(text) is not None
