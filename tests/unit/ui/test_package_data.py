"""The dashboard's files ship in the wheel: pyproject's package-data globs for ``gateway.ui`` cover
every template, script, style, vendored file and licence under gateway/ui (setuptools reads the
same globs relative to the package)."""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path

from tests.support.workers import REPO

UI = Path(REPO) / "gateway" / "ui"


def test_every_static_file_and_template_is_package_data():
    # the one line of [tool.setuptools.package-data] (tomllib is 3.11+; the package supports 3.10)
    line = re.search(r'^"gateway\.ui" = (\[.*\])$', (Path(REPO) / "pyproject.toml").read_text(), re.MULTILINE)
    assert line, "pyproject.toml declares no package data for gateway.ui"
    shipped = {p for pattern in json.loads(line.group(1)) for p in glob.glob(pattern, root_dir=UI)}
    on_disk = {str(p.relative_to(UI)) for d in ("static", "templates") for p in (UI / d).rglob("*") if p.is_file()}
    assert on_disk and on_disk <= shipped, sorted(on_disk - shipped)
    for licence in ("static/vendor/alpinejs/LICENSE.md", "static/vendor/uplot/LICENSE", "static/vendor/VENDORED.md"):
        assert licence in shipped
