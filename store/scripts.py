"""The Lua scripts in store/lua/, called with named keys and arguments.

Each script names its inputs at its top, one per line, and that list is the only place the
order is written down:

    -- KEYS[1] job        the job record (hash)
    -- ARGV[1] head       the event's JSON up to its seq

The loader binds every name to a Lua local of the same name ahead of the script's body, and a
call passes them as keyword arguments, so no caller counts positions. A ``-- include: now.lua``
line puts a shared snippet from the same folder ahead of the body. ``None`` is sent as ``''``
(the scripts read ``''`` as "not given") and a bool as 1 or 0.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

_INPUT = re.compile(r"^--\s*(KEYS|ARGV)\[(\d+)\]\s+([A-Za-z_]\w*)", re.MULTILINE)
_INCLUDE = re.compile(r"^--\s*include:\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True)
class LuaSource:
    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    text: str  # what Redis runs: the includes, the named locals, the body


def _read(filename: str) -> str:
    return resources.files("store").joinpath("lua").joinpath(filename).read_text(encoding="utf-8")


def _names(body: str, kind: str, script: str) -> tuple[str, ...]:
    found = sorted((int(i), name) for k, i, name in _INPUT.findall(body) if k == kind)
    if [i for i, _ in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{script}.lua: {kind} must be documented as {kind}[1], {kind}[2], ... without gaps")
    return tuple(name for _, name in found)


@functools.cache
def load(name: str) -> LuaSource:
    """Read store/lua/<name>.lua with its includes and its inputs bound to named locals."""
    body = _read(f"{name}.lua")
    keys, args = _names(body, "KEYS", name), _names(body, "ARGV", name)
    if len(set(keys + args)) != len(keys) + len(args):
        raise ValueError(f"{name}.lua: a name is documented twice")
    includes = [_read(f) for f in _INCLUDE.findall(body)]
    bind = [f"local {n} = KEYS[{i}]" for i, n in enumerate(keys, 1)]
    bind += [f"local {n} = ARGV[{i}]" for i, n in enumerate(args, 1)]
    return LuaSource(name, keys, args, "\n".join([*includes, *bind, body]))


def _value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return int(v)
    return v


class Script:
    """One script of store/lua/ registered with a Redis client; call it with its documented names."""

    def __init__(self, redis: Any, name: str):
        self.source = load(name)
        self._script = redis.register_script(self.source.text)

    def bind(self, **named: Any) -> tuple[list[Any], list[Any]]:
        """The call's KEYS and ARGV, in the script's order."""
        src = self.source
        wanted = set(src.keys) | set(src.args)
        if set(named) != wanted:
            missing, extra = sorted(wanted - set(named)), sorted(set(named) - wanted)
            raise TypeError(f"{src.name}.lua: missing {missing}, unexpected {extra}")
        return [named[k] for k in src.keys], [_value(named[a]) for a in src.args]

    async def __call__(self, **named: Any) -> Any:
        # redis-py's Script runs EVALSHA and, on NOSCRIPT (a restarted or newly promoted
        # primary has an empty script cache), loads the script and runs it again
        keys, args = self.bind(**named)
        return await self._script(keys=keys, args=args)

    def queue(self, pipe: Any, **named: Any) -> None:
        """Add a call to a pipeline as EVAL with the script's text: a pipeline cannot reload a
        script that its Redis lost, and the text costs little for the few writes sent this way."""
        keys, args = self.bind(**named)
        pipe.eval(self.source.text, len(keys), *keys, *args)
