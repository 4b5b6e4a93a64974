"""The chat templates maintained in this repository, in ``chat_templates/`` at its root.

``TEMPLATES_DIR`` is the one place that names that folder; the worker's settings resolve a bare
template file name against it.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "chat_templates"


def available_templates() -> list[str]:
    """The stems of the maintained templates (``hermes3_tool_calling``, ...)."""
    return sorted(p.stem for p in TEMPLATES_DIR.glob("*.j2"))
