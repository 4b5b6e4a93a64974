"""The CLI's console where rich is not installed (the light client, pyproject.toml): the calls
toolq/commands/console.py makes of rich's ``Console``, ``Panel`` and ``escape``, printed as plain
lines with the markup taken out."""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

# rich markup as console.py writes it ([dim], [bold red], [/green]); an escaped "\[" is text
_TAG = re.compile(r"(?<!\\)\[/?[a-z][a-z ]*\]")


def escape(text: str) -> str:
    """Text that ``Console.print`` shows as it is."""
    return text.replace("[", "\\[")


def _plain(text: str) -> str:
    return _TAG.sub("", text).replace("\\[", "[")


class Panel:
    def __init__(self, renderable: str, *, title: str = "", subtitle: str = "", **_style: Any):
        self.renderable, self.title, self.subtitle = renderable, title, subtitle


class Console:
    def __init__(self, file: TextIO | None = None):
        self.file = file

    def print(self, obj: str | Panel, *, end: str = "\n", **_style: Any) -> None:
        if isinstance(obj, Panel):
            text = f"\n── {obj.title} ──\n{_plain(obj.renderable)}\n── {obj.subtitle} ──"
        else:
            text = _plain(str(obj))
        out = self.file or sys.stdout
        out.write(text + end)
        out.flush()
