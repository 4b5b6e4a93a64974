"""The documents hold together: every relative link in README.md, ARCHITECTURE.md and docs/**/*.md
names a file that exists, and every #anchor (in the same file or another) names a heading there,
slugged as GitHub slugs it. And the README's quickstart still gives the two commands (.ci/run runs
its test command exactly). Standard library only: the Markdown is read with a few regexes, code
blocks and code spans left out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target "title"), ![alt](target): the target up to a space or the closing parenthesis
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fence = [], None
    for number, line in enumerate(text.split("\n"), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0] * 3
        elif fence is not None and opened and opened.group(1).startswith(fence):
            fence = None
        elif fence is None:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and code marks dropped), lowercased, every
    character but letters, digits, spaces, '-' and '_' dropped, spaces made '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = CODE_SPAN.sub(lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a file offers: its headings' slugs (a repeated one as GitHub numbers it:
    x, x-1, x-2), and any <a name|id="...">."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text()):
        if heading := HEADING.match(line):
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the prose of a file, code spans left out."""
    found = []
    for number, line in prose_lines(path.read_text()):
        line = CODE_SPAN.sub("", line)
        found += [(number, target) for target in INLINE_LINK.findall(line)]
        if definition := REFERENCE_DEF.match(line):
            found.append((number, definition.group(1)))
    return found


def broken_links(path: Path, repo: Path = REPO) -> list[str]:
    """What is wrong with the relative links of one file, one line each (empty: nothing)."""
    problems = []
    for number, target in links(path):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue  # an external URL (http:, https:, mailto:) is not this test's to check
        where = f"{path.relative_to(repo)}:{number}: {target}"
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if repo.resolve() not in (linked, *linked.parents):
            problems.append(f"{where}: points outside the repository")
        elif not linked.exists():
            problems.append(f"{where}: no such file {linked.relative_to(repo.resolve())}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading with the anchor #{anchor} in {linked.relative_to(repo.resolve())}")
        elif anchor and linked.suffix != ".md":
            problems.append(f"{where}: an anchor into a file that is not Markdown")
    return problems


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path):
    problems = broken_links(path)
    assert not problems, "\n".join(problems)


def test_docs_pages_exist_and_are_linked_from_the_readme_or_architecture():
    pages = [p for p in documents() if p.parent != REPO]
    assert pages, "docs/ holds no page"
    reachable = set()
    for top in (REPO / "README.md", REPO / "ARCHITECTURE.md"):
        for _, target in links(top):
            file_part = target.partition("#")[0]
            if file_part and not SCHEME.match(file_part):
                reachable.add((REPO / file_part).resolve())
    unlinked = [str(p.relative_to(REPO)) for p in pages if p.resolve() not in reachable]
    assert not unlinked, f"linked from neither README.md nor ARCHITECTURE.md: {unlinked}"


def test_the_checker_finds_a_broken_file_a_broken_anchor_and_ignores_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Sizing Redis: `maxmemory`\n\n## Twice\n\n## Twice\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n## Quick start\n\n"
        "[ok](docs/page.md#sizing-redis-maxmemory) [ok](#quick-start) [ok](docs/page.md#twice-1)\n"
        "[web](https://example.com/x#y) `[in code](nowhere.md)`\n\n"
        "```\n[in a block](nowhere.md)\n## not a heading\n```\n\n"
        "[gone](docs/missing.md) [bad anchor](docs/page.md#sizing) [bad here](#not-a-heading)\n"
    )
    problems = broken_links(readme, tmp_path)
    assert [p.split(": ")[1] for p in problems] == ["docs/missing.md", "docs/page.md#sizing", "#not-a-heading"]


def quickstart() -> str:
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## Quickstart\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, "the README has no '## Quickstart' section"
    return section.group(1)


def test_the_readme_quickstart_gives_the_demo_and_the_test_command():
    commands = [line.split("#")[0].strip() for line in quickstart().split("\n")]
    assert "bash scripts/demo.sh" in commands
    assert "bash scripts/test.sh" in commands


def test_ci_runs_exactly_the_readme_test_command():
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().split("\n")]
    test_command = next(line for line in ci if line.startswith("bash scripts/test"))
    assert test_command in [line.split("#")[0].strip() for line in quickstart().split("\n")]
