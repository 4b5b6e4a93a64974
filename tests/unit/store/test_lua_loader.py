"""The Lua loader (store/scripts.py): entry scripts in store/lua/, snippets in store/lua/lib/,
pasted in their declared order, each once, and a cycle or a missing snippet refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import scripts
from store.scripts import ScriptError, assemble, entry_scripts, load

LUA = Path(scripts.__file__).parent / "lua"


def _tree(tmp_path: Path, entry: str, **snippets: str) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "op.lua").write_text(entry)
    for name, text in snippets.items():
        (tmp_path / "lib" / f"{name}.lua").write_text(text)
    return tmp_path


def test_snippets_come_in_declared_order_after_what_they_require_and_each_once(tmp_path):
    root = _tree(
        tmp_path,
        "-- KEYS[1] job\n-- ARGV[1] ms\n-- include: b.lua\n-- include: a.lua\nreturn b(a())\n",
        a="-- requires: now.lua\nlocal function a() return now() end\n",
        b="-- requires: now.lua\n-- requires: a.lua\nlocal function b(x) return x end\n",
        now="local function now() return 1 end\n",
    )
    src = assemble("op", root)
    assert src.snippets == ("now.lua", "a.lua", "b.lua")  # b's requirements first, now.lua once
    assert src.keys == ("job",) and src.args == ("ms",)
    text = src.text
    assert text.count("local function now()") == 1
    assert text.index("function now") < text.index("function a") < text.index("function b")
    assert text.index("function b") < text.index("local job = KEYS[1]") < text.index("return b(a())")


def test_a_cycle_among_snippets_is_refused_with_its_chain(tmp_path):
    root = _tree(
        tmp_path,
        "-- include: a.lua\nreturn 1\n",
        a="-- requires: b.lua\nlocal function a() end\n",
        b="-- requires: c.lua\nlocal function b() end\n",
        c="-- requires: a.lua\nlocal function c() end\n",
    )
    with pytest.raises(ScriptError, match=r"op\.lua: .*cycle: a\.lua -> b\.lua -> c\.lua -> a\.lua"):
        assemble("op", root)


def test_a_snippet_requiring_itself_is_a_cycle(tmp_path):
    root = _tree(tmp_path, "-- include: a.lua\nreturn 1\n", a="-- requires: a.lua\nlocal function a() end\n")
    with pytest.raises(ScriptError, match=r"cycle: a\.lua -> a\.lua"):
        assemble("op", root)


def test_a_missing_snippet_is_refused_naming_who_asked(tmp_path):
    root = _tree(tmp_path, "-- include: gone.lua\nreturn 1\n")
    with pytest.raises(ScriptError, match=r"op\.lua: no snippet 'gone\.lua' in lua/lib/"):
        assemble("op", root)
    root2 = tmp_path / "two"
    root2.mkdir()
    _tree(root2, "-- include: a.lua\nreturn 1\n", a="-- requires: gone.lua\nlocal function a() end\n")
    with pytest.raises(ScriptError, match=r"lua/lib/a\.lua: no snippet 'gone\.lua'"):
        assemble("op", root2)


def test_a_snippet_takes_no_inputs_and_an_entry_script_must_exist(tmp_path):
    root = _tree(tmp_path, "-- include: a.lua\nreturn 1\n", a="-- KEYS[1] job\nlocal function a() end\n")
    with pytest.raises(ScriptError, match=r"a snippet takes no KEYS or ARGV"):
        assemble("op", root)
    with pytest.raises(ScriptError, match=r"no entry script nope\.lua"):
        assemble("nope", root)


def test_a_const_line_binds_the_layout_value_and_no_call_sends_it(tmp_path):
    root = _tree(tmp_path, "-- KEYS[1] job\n-- const job_prefix   how job keys start\nreturn job_prefix\n")
    src = assemble("op", root, {"job_prefix": "toolq:job:"})
    assert src.keys == ("job",) and src.args == () and src.consts == ("job_prefix",)
    assert src.text.index('local job_prefix = "toolq:job:"') < src.text.index("return job_prefix")
    shipped = load("submit")
    assert "job_prefix" in shipped.consts and "job_prefix" not in shipped.args


def test_a_const_the_layout_lacks_or_that_needs_escaping_or_doubles_an_input_is_refused(tmp_path):
    root = _tree(tmp_path, "-- ARGV[1] job_prefix\n-- const job_prefix\n-- const nope\nreturn 1\n")
    with pytest.raises(ScriptError, match=r"no layout constant 'nope'"):
        assemble("op", root, {"job_prefix": "p:"})
    with pytest.raises(ScriptError, match=r"would escape"):
        assemble("op", root, {"job_prefix": 'p"', "nope": 1})
    with pytest.raises(ScriptError, match=r"documented twice"):
        assemble("op", root, {"job_prefix": "p:", "nope": 1})


def test_every_shipped_script_assembles_and_snippets_live_apart():
    names = entry_scripts()
    assert len(names) >= 20 and "emit" in names and "submit" in names
    snippets = {p.name for p in (LUA / "lib").glob("*.lua")}
    assert snippets and not snippets & {f"{n}.lua" for n in names}  # no file is both
    used: set[str] = set()
    for name in names:
        src = load(name)
        used.update(src.snippets)
    assert used == snippets  # no snippet lies unused
