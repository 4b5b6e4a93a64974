"""The test command also runs the static checks, so CI fails when they fail.

The rules live in pyproject.toml: [tool.ruff] for lint and format, [tool.mypy] for the types
(strict on toolq/, mypy's default plus check_untyped_defs on worker/ and gateway/). The import
contracts are checked by tests/unit/test_layering.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Each runs with this interpreter from the repository root, so pyproject.toml is the config and
# the tree checked is this checkout. No skip when a tool is missing: the test extra installs them,
# and a missing tool must fail, not pass silently.
CHECKS = {
    "ruff check": [sys.executable, "-m", "ruff", "check", "--no-fix", "."],
    "ruff format": [sys.executable, "-m", "ruff", "format", "--check", "."],
    "mypy": [sys.executable, "-m", "mypy"],  # the files and the strictness come from [tool.mypy]
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_static_check_passes(name: str) -> None:
    done = subprocess.run(CHECKS[name], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}{done.stderr}"
