"""The rooms import only what they may: the import-linter contracts in pyproject.toml hold."""

from __future__ import annotations

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
