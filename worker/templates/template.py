"""A chat template: loaded from a file or a GGUF's metadata, probed once, rendered many times.

``render_raw`` renders message dicts exactly as given, as HF's ``apply_chat_template`` would.
``render`` renders a protocol conversation adapted to what the template supports, and says which
parts of the prompt are template markup (trusted, may contain control tokens) and which are
message text (untrusted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolq.wire.protocol import Message
from worker.formats.base import ToolCallFormat, ToolDefinition
from worker.templates.adapt import Adapter
from worker.templates.context import TemplateContext, probe_context
from worker.templates.errors import TemplateError
from worker.templates.markers import clean_json, mark_spec, segments, unmark
from worker.templates.probe import Capabilities, probe_capabilities, probe_wraps_tool_results
from worker.templates.sandbox import compile_template, run_template, undeclared_variables


@dataclass
class RenderedPrompt:
    """The prompt, and the same text cut into (piece, trusted) segments that join to it."""

    text: str
    segments: list[tuple[str, bool]]


class ChatTemplate:
    """A compiled chat template; probe once, render many times (every loop iteration)."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", name: str = "chat_template"):
        self.source = source
        self.name = name
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self._template = compile_template(source, name)
        self._reads = undeclared_variables(source)
        self._context: TemplateContext | None = None
        self._capabilities: Capabilities | None = None
        # Per tool-call format: does the template wrap tool results itself (hermes3 does)?
        self._wraps_results: dict[str, bool] = {}

    # -- loading

    @classmethod
    def from_file(cls, path: str | Path, bos_token: str = "", eos_token: str = "") -> ChatTemplate:
        path = Path(path)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = getattr(e, "strerror", None) or e
            raise TemplateError(f"cannot read chat template {path}: {reason}") from None
        return cls(source, bos_token=bos_token, eos_token=eos_token, name=path.name)

    @classmethod
    def from_gguf_metadata(
        cls, metadata: Mapping[str, Any], bos_token: str = "", eos_token: str = "", *, prefer: str = "tool_use"
    ) -> ChatTemplate:
        """The template a GGUF carries. Some files carry named variants besides the default
        (``tokenizer.chat_template.tool_use`` in Hermes 2 Pro); the ``prefer`` one wins."""
        for key in (f"tokenizer.chat_template.{prefer}", "tokenizer.chat_template"):
            source = metadata.get(key)
            if isinstance(source, str) and source.strip():
                return cls(source, bos_token=bos_token, eos_token=eos_token, name=key)
        raise TemplateError("the model file has no chat template (no tokenizer.chat_template in its metadata)")

    # -- raw rendering

    def render_raw(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render message dicts exactly as given, as HF's apply_chat_template would, plus the
        variables this template reads besides (``worker/templates/context.py``)."""
        return self._render_with(list(messages), list(tools) if tools else None, self.context, add_generation_prompt)

    def _render_with(
        self,
        messages: list[Any],
        tools: list[Any] | None,
        context: TemplateContext,
        add_generation_prompt: bool = True,
    ) -> str:
        variables = {
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        return run_template(self._template, self.name, **(variables | context.variables(tools)))

    @property
    def context(self) -> TemplateContext:
        """What this template reads besides HF's variables; found once."""
        if self._context is None:
            self._context = probe_context(self._reads, self._render_with)
        return self._context

    # -- capabilities

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self._probe()
        return self._capabilities

    def _probe(self) -> Capabilities:
        return probe_capabilities(self.render_raw)

    def wraps_tool_results(self, fmt: ToolCallFormat) -> bool:
        """Whether the template already puts the format's wrapper (``<tool_response>``) around
        tool content, so that passing fmt.render_tool_result(...) would wrap it twice."""
        if fmt.name not in self._wraps_results:
            self._wraps_results[fmt.name] = probe_wraps_tool_results(self.render_raw, self.capabilities, fmt)
        return self._wraps_results[fmt.name]

    # -- rendering a conversation

    def render(
        self,
        messages: Sequence[Message | Mapping[str, Any]],
        *,
        tools: Sequence[ToolDefinition],
        fmt: ToolCallFormat,
        add_generation_prompt: bool = True,
        prompt_variant: str | None = None,
    ) -> RenderedPrompt:
        """The prompt for a conversation, adapted to what this template supports."""
        msgs = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        tools = [clean_json(t) for t in tools or ()]
        caps = self.capabilities
        # probed only for a conversation that has a tool result to show in the tool role
        wraps = caps.tool_role and any(m.role == "tool" for m in msgs) and self.wraps_tool_results(fmt)
        marked = Adapter(caps, wraps, fmt, tools, prompt_variant).adapt(msgs)
        shown_tools = tools if (tools and caps.renders_tools) else None
        # the tools' descriptions and schemas are the caller's text too: marked, like messages
        marked_tools = mark_spec(shown_tools) if shown_tools else None
        marked_text = self.render_raw(marked, tools=marked_tools, add_generation_prompt=add_generation_prompt)
        plain_text = self.render_raw(unmark(marked), tools=shown_tools, add_generation_prompt=add_generation_prompt)
        return RenderedPrompt(text=plain_text, segments=segments(plain_text, marked_text))

    def __repr__(self) -> str:
        return f"ChatTemplate({self.name!r})"
