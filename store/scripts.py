"""The Lua scripts of store/lua/, called with named keys and arguments.

Two kinds of file, kept apart:

- an **entry script** (``lua/<name>.lua``) is what Redis runs: one operation, called by name. It
  names its inputs at its top, one per line, and that list is the only place the order is
  written down::

      -- KEYS[1] job        the job record (hash)
      -- ARGV[1] head       the event's JSON up to its seq

- a **snippet** (``lua/lib/<name>.lua``) holds local functions that entry scripts share. It takes
  no inputs of its own, and names the snippets whose functions it calls with ``-- requires:
  other.lua`` lines.

An entry script names the snippets it calls with ``-- include: name.lua`` lines. The loader
pastes them ahead of the body in a declared order: each include in the order written, each
snippet after the snippets it requires, each once. A cycle among snippets or a snippet that does
not exist is refused when the script is loaded, naming the chain or the file that asks for it.
Then it binds every input name to a Lua local of the same name, so no caller counts positions.
A call passes them as keyword arguments. ``None`` is sent as ``''`` (the scripts read ``''`` as
"not given") and a bool as 1 or 0.

A ``-- const name`` line binds a local to a fixed part of the key layout instead
(store/lua_constants.py: a key prefix, the wake backlog): the script takes it from the store, not
from each caller, and no call sends it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from store.lua_constants import CONSTANTS

if TYPE_CHECKING:
    from collections.abc import Mapping
    from importlib.abc import Traversable  # importlib.resources.abc from Python 3.11 on

_INPUT = re.compile(r"^--\s*(KEYS|ARGV)\[(\d+)\]\s+([A-Za-z_]\w*)", re.MULTILINE)
_INCLUDE = re.compile(r"^--\s*include:\s*(\S+)", re.MULTILINE)
_REQUIRES = re.compile(r"^--\s*requires:\s*(\S+)", re.MULTILINE)
_CONST = re.compile(r"^--\s*const\s+([A-Za-z_]\w*)", re.MULTILINE)
_PLAIN = re.compile(r"[A-Za-z0-9_:.{}-]*")  # what a constant may hold, so it needs no escaping in Lua
LIB = "lib"  # the snippets' folder inside lua/


@dataclass(frozen=True)
class LuaSource:
    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    snippets: tuple[str, ...]  # the snippets pasted in, in their order
    consts: tuple[str, ...]  # the layout constants bound as locals (store/lua_constants.py)
    text: str  # what Redis runs: the snippets, the named locals, the body


class ScriptError(ValueError):
    """A script that cannot be assembled: a cycle among its snippets, a missing snippet, or
    inputs documented wrongly."""


def _lua() -> Traversable:
    return resources.files("store").joinpath("lua")


def _read(folder: Traversable, filename: str, wanted_by: str) -> str:
    path = folder.joinpath(filename)
    if not path.is_file():
        raise ScriptError(f"{wanted_by}: no snippet {filename!r} in lua/{LIB}/")
    return path.read_text(encoding="utf-8")


def snippet_order(body: str, name: str, lib: Traversable) -> list[tuple[str, str]]:
    """The snippets an entry script includes, each after those it requires and each once, with
    their text. Raises ScriptError on a cycle or a missing snippet."""
    done: dict[str, str] = {}
    chain: list[str] = []  # the snippets being resolved, outermost first

    def visit(filename: str, wanted_by: str) -> None:
        if filename in chain:
            loop = " -> ".join([*chain[chain.index(filename) :], filename])
            raise ScriptError(f"{name}.lua: its snippets require each other in a cycle: {loop}")
        if filename in done:
            return
        text = _read(lib, filename, wanted_by)
        if _INPUT.search(text):
            raise ScriptError(f"lua/{LIB}/{filename}: a snippet takes no KEYS or ARGV of its own")
        chain.append(filename)
        for required in _REQUIRES.findall(text):
            visit(required, f"lua/{LIB}/{filename}")
        chain.pop()
        done[filename] = text

    for filename in _INCLUDE.findall(body):
        visit(filename, f"{name}.lua")
    return list(done.items())


def _names(body: str, kind: str, script: str) -> tuple[str, ...]:
    found = sorted((int(i), name) for k, i, name in _INPUT.findall(body) if k == kind)
    if [i for i, _ in found] != list(range(1, len(found) + 1)):
        raise ScriptError(f"{script}.lua: {kind} must be documented as {kind}[1], {kind}[2], ... without gaps")
    return tuple(name for _, name in found)


def _const_binds(body: str, script: str, constants: Mapping[str, str | int]) -> list[tuple[str, str]]:
    binds = []
    for n in _CONST.findall(body):
        if n not in constants:
            raise ScriptError(f"{script}.lua: no layout constant {n!r} (store/lua_constants.py)")
        value = str(constants[n])
        if not _PLAIN.fullmatch(value):
            raise ScriptError(f"{script}.lua: the constant {n!r} holds characters a Lua literal would escape")
        binds.append((n, f'local {n} = "{value}"'))
    return binds


def assemble(name: str, root: Traversable, constants: Mapping[str, str | int] | None = None) -> LuaSource:
    """Read ``root/<name>.lua`` with its snippets from ``root/lib/``, its inputs bound to named
    locals and its ``-- const`` names to ``constants`` (default: store/lua_constants.py)."""
    entry = root.joinpath(f"{name}.lua")
    if not entry.is_file():
        raise ScriptError(f"no entry script {name}.lua in lua/")
    body = entry.read_text(encoding="utf-8")
    if constants is None:
        constants = CONSTANTS
    keys, args = _names(body, "KEYS", name), _names(body, "ARGV", name)
    consts = _const_binds(body, name, constants)
    names = [*keys, *args, *(n for n, _ in consts)]
    if len(set(names)) != len(names):
        raise ScriptError(f"{name}.lua: a name is documented twice")
    snippets = snippet_order(body, name, root.joinpath(LIB))
    bind = [f"local {n} = KEYS[{i}]" for i, n in enumerate(keys, 1)]
    bind += [f"local {n} = ARGV[{i}]" for i, n in enumerate(args, 1)]
    bind += [line for _, line in consts]
    text = "\n".join([*(t for _, t in snippets), *bind, body])
    return LuaSource(name, keys, args, tuple(f for f, _ in snippets), tuple(n for n, _ in consts), text)


@functools.cache
def load(name: str) -> LuaSource:
    """store/lua/<name>.lua, assembled (``assemble``)."""
    return assemble(name, _lua())


def entry_scripts() -> list[str]:
    """The names of every entry script in store/lua/."""
    return sorted(p.name[:-4] for p in _lua().iterdir() if p.is_file() and p.name.endswith(".lua"))


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
