"""The chat-template corpus: the real templates llama.cpp vendors (``vendor/llama.cpp/models/templates/``
of the llama-cpp-python sdist), which scripts/setup.sh extracts into the virtual environment.

The templates are llama.cpp's (MIT licence), each copied there from its model's repository. A test
that needs them and does not find them fails, saying how to get them: a silently skipped corpus
test would hide every regression it exists to catch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "TOOLQ_TEMPLATE_CORPUS"
# scripts/setup.sh extracts the corpus here, in the environment the tests run in.
DEFAULT = Path(sys.prefix) / "share" / "toolq" / "template-corpus"
# The sdist of llama-cpp-python 0.3.36 carries 70; far fewer means a broken extraction.
MIN_TEMPLATES = 50
MISSING = "<template corpus missing>"


class CorpusMissing(AssertionError):
    """The corpus is not where the tests look; the message says how to get it."""


def corpus_dir() -> Path:
    """The folder of corpus templates (``*.jinja``): ``$TOOLQ_TEMPLATE_CORPUS`` or the one
    scripts/setup.sh extracted. Raises CorpusMissing when it is absent or nearly empty."""
    path = Path(os.environ.get(ENV) or DEFAULT)
    found = len(list(path.glob("*.jinja"))) if path.is_dir() else 0
    if found < MIN_TEMPLATES:
        raise CorpusMissing(
            f"the chat-template corpus is missing: {path} holds {found} templates (expected at least "
            f"{MIN_TEMPLATES}). Run scripts/setup.sh, which extracts it from the llama-cpp-python sdist, "
            f"or point {ENV} at a copy of llama.cpp's models/templates/."
        )
    return path


def corpus_templates() -> list[str]:
    """The corpus templates' file names, sorted, for parametrizing tests. When the corpus is
    missing this is one placeholder, so the tests run and fail with corpus_dir()'s message
    instead of collecting nothing."""
    try:
        return sorted(p.name for p in corpus_dir().glob("*.jinja"))
    except CorpusMissing:
        return [MISSING]


def corpus_path(name: str) -> Path:
    """One corpus template's path; raises CorpusMissing for the placeholder."""
    return corpus_dir() / name
