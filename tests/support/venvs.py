"""Scratch virtual environments that install toolq as a user does: `python -m venv`, then pip
from the package index, with a copy of this checkout as the project (an install from the checkout
itself would build in the tree and leave build/ and *.egg-info there).

They run slowly (pip resolves and downloads), so the tests that use one are marked ``venv``
(pyproject.toml) and given generous timeouts; pip's own cache keeps later runs short."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.processes import REPO

__all__ = ["PIP_TIMEOUT_S", "ScratchVenv", "checkout_copy"]

PIP_TIMEOUT_S = 420  # a cold pip cache on a loaded machine; a warm one takes seconds
# what a wheel of toolq is built from (pyproject.toml: [tool.setuptools])
_PROJECT = ("pyproject.toml", "README.md", "toolq", "store", "worker", "gateway", "webhooks")
# the venv's own tools, not what the project installs
_TOOLING = {"pip", "setuptools", "wheel"}


def checkout_copy(dest: Path) -> Path:
    """The project's files, copied to ``dest`` without caches: what ``pip install <checkout>`` reads."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in _PROJECT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


class ScratchVenv:
    def __init__(self, path: Path):
        self.path = path
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
        self.python = str(path / "bin" / "python")
        self.bin = path / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment for the venv's processes: nothing of this checkout on sys.path."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}

    def pip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [self.python, "-m", "pip", *args],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            env=self.env(),
            cwd=self.path,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"pip {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def packages(self) -> dict[str, str]:
        """What the project installed: name -> version, the venv's own tooling left out."""
        listed = json.loads(self.pip("list", "--format", "json").stdout)
        return {p["name"].lower(): p["version"] for p in listed if p["name"].lower() not in _TOOLING}

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """A command of the venv (``python``, ``toolq``, ...) run outside the checkout."""
        exe = str(self.bin / args[0])
        return subprocess.run(
            [exe, *args[1:]], capture_output=True, text=True, timeout=timeout, env=self.env(**env), cwd=self.path
        )
