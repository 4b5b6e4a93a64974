"""The rooms import only what they may: the import-linter contracts in pyproject.toml hold, and no
two modules of the house import each other, directly or around a circle."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def test_import_contracts_are_kept():
    # Run from the repository root with this interpreter, so the packages analysed are this
    # checkout's (the current directory comes first on the path), not an installed copy.
    done = subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of a directed graph, iteratively (no recursion
    limit), each sorted; only those of more than one node, which are the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_strongly_connected_finds_circles_and_only_circles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert sorted(strongly_connected(edges)) == [["a", "b", "c"], ["d", "e"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_the_house():
    # Every import counts, TYPE_CHECKING and function-level ones included: a circle drawn only for
    # the type checker is still two modules that cannot be understood apart. A package's
    # __init__ is a module like any other.
    import grimp

    graph = grimp.build_graph("toolq", "store", "worker", "gateway", "webhooks", cache_dir=None)
    for package in ("toolq", "store", "worker", "gateway", "webhooks"):
        origin = importlib.util.find_spec(package).origin  # the checkout's code, not an installed copy
        assert origin is not None and Path(origin).is_relative_to(REPO), origin
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    circles = strongly_connected(edges)
    assert circles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)
