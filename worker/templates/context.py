"""The variables a chat template is rendered with: HF's own, and what some templates read besides.

HF's ``apply_chat_template`` passes ``messages``, ``tools``, ``add_generation_prompt``,
``bos_token`` and ``eos_token``. Real templates read more, as llama.cpp's renderer found out:
firefunction v2 reads ``functions`` (the tools as indented JSON text) and ``datetime``; Llama 3.1
reads ``date_string`` when it is given; Command R+ iterates ``tools`` even when there are none.
What a template reads is found once, from its source (``undeclared_variables``) and, for the empty
tool list, by rendering one sample (``probe_context``).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.templates.errors import TemplateError

# (messages, tools, add_generation_prompt) -> prompt text, with the context as found so far.
RenderWith = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, "TemplateContext"], str]


@dataclass(frozen=True)
class TemplateContext:
    """What a template reads beyond HF's variables, and so what it is given."""

    # The template reads ``functions``: the tools as JSON text (firefunction v2).
    functions: bool = False
    # The template reads ``datetime`` (firefunction v2) or ``date_string`` (Llama 3.x): now.
    datetime: bool = False
    date_string: bool = False
    # The template iterates ``tools`` unguarded (Command R+ tool_use): pass [] rather than none.
    tools_list: bool = False

    def variables(self, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The extra variables for one render with these tools (None: no tools offered)."""
        extra: dict[str, Any] = {}
        if tools is None and self.tools_list:
            extra["tools"] = []
        if self.functions:
            extra["functions"] = json.dumps(tools, indent=2, ensure_ascii=False) if tools else ""
        now = _dt.datetime.now(_dt.timezone.utc)
        if self.datetime:
            extra["datetime"] = now.strftime("%b %d %Y %H:%M:%S GMT")
        if self.date_string:
            extra["date_string"] = now.strftime("%d %b %Y")
        return extra


_USER = [{"role": "user", "content": "probe-user-c1e3"}]


def probe_context(reads: set[str], render_with: RenderWith) -> TemplateContext:
    """The context for a template that reads these undeclared variables; renders one sample when
    the template may need an empty tool list."""
    found = TemplateContext(
        functions="functions" in reads,
        datetime="datetime" in reads,
        date_string="date_string" in reads,
    )
    if "tools" not in reads or _renders(render_with, None, found):
        return found
    with_list = TemplateContext(found.functions, found.datetime, found.date_string, tools_list=True)
    return with_list if _renders(render_with, None, with_list) else found


def _renders(render_with: RenderWith, tools: list[dict[str, Any]] | None, context: TemplateContext) -> bool:
    try:
        render_with(list(_USER), tools, context)
    except TemplateError:
        return False
    return True
