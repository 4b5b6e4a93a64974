"""Chat templates: loading, a Jinja sandbox, capability probing and role adaptation.

A chat template turns a conversation into the one prompt string a model was trained on. They
come from ``chat_templates/`` (maintained here) or from a GGUF's own metadata, and the latter is
code we did not write: it runs in Jinja's immutable sandbox, and any reach for Python internals
fails with our error instead of running.

Templates differ in what they can show. Many have no tool role, cannot render ``tool_calls``,
ignore ``tools`` or insist that user and assistant alternate. Each template is probed once by
rendering small sample conversations, and ``render`` adapts the conversation to what it found:
tool instructions go into the system prompt (or the first user turn), calls are written inline
in the tool-call format's own syntax, results become user turns, same-role turns are merged.

``render`` also says which parts of the prompt are template markup (trusted, may contain control
tokens) and which are message text (untrusted): the engine tokenizes untrusted text without
special-token parsing, so a user who types ``<|im_end|>`` gets the characters, not the token.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from toolq.protocol import FunctionCall, Message, ToolCall
from worker.formats.base import ToolCallFormat, ToolDefinition

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "chat_templates"

__all__ = [
    "TEMPLATES_DIR",
    "Capabilities",
    "ChatTemplate",
    "RenderedPrompt",
    "TemplateError",
    "TemplateRaisedError",
    "TemplateSyntaxError",
    "UnsafeTemplateError",
    "available_templates",
]


# ---------------------------------------------------------------- errors


class TemplateError(Exception):
    """A chat template could not be loaded or rendered; str() says why, for a human."""


class TemplateSyntaxError(TemplateError):
    """The template source does not compile."""


class UnsafeTemplateError(TemplateError):
    """The template reached for something the sandbox forbids; it was stopped, not run."""


class TemplateRaisedError(TemplateError):
    """The template itself called ``raise_exception(message)``."""


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Capabilities:
    """What a template can render, found by probing it with sample conversations."""

    system_role: bool
    tool_role: bool
    tool_calls: bool
    renders_tools: bool
    strict_alternation: bool
    # Some templates concatenate ``arguments`` as a string (functionary v2.2): pass JSON text.
    tool_call_arguments_as_string: bool = False
    # Some templates add ``content`` to a string even when the turn is only calls: pass "".
    tool_call_content_empty_string: bool = False


@dataclass
class RenderedPrompt:
    """The prompt, and the same text cut into (piece, trusted) segments that join to it."""

    text: str
    segments: list[tuple[str, bool]]


# ---------------------------------------------------------------- untrusted-text markers
#
# Untrusted strings go into the template wrapped in two Unicode noncharacters (reserved for
# internal use, never meaningful in text); after rendering, the markers show where message text
# landed. Marker characters are removed from every input first, so content cannot fake them.

OPEN_MARK = "\ufdd0"
CLOSE_MARK = "\ufdd1"
_MARK_SPLIT = re.compile(f"([{OPEN_MARK}{CLOSE_MARK}])")


def _clean(text: str) -> str:
    # Checked first because almost no text has them and this runs on every string every render.
    if OPEN_MARK in text or CLOSE_MARK in text:
        return text.replace(OPEN_MARK, "").replace(CLOSE_MARK, "")
    return text


def _mark(text: str) -> str:
    """Wrap untrusted text, leaving outer whitespace outside the markers.

    Templates strip content (llama2's ``content.strip()``, ``| trim``); with the whitespace
    outside, stripping still removes it, and whitespace is harmless as trusted text.
    """
    text = _clean(text)
    core = text.strip()
    if not core:
        return text
    start = text.index(core[0])
    return f"{text[:start]}{OPEN_MARK}{core}{CLOSE_MARK}{text[start + len(core):]}"


def _mark_json(value: Any) -> Any:
    """Mark every string (keys too) inside a JSON-like value; numbers etc. are harmless."""
    if isinstance(value, str):
        return _mark(value)
    if isinstance(value, Mapping):
        return {_mark(str(k)): _mark_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mark_json(v) for v in value]
    return value


def _clean_json(value: Any) -> Any:
    """Remove marker characters from every string of a trusted JSON-like value (tool specs)."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, Mapping):
        return {_clean(str(k)): _clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_json(v) for v in value]
    return value


def _unmark(value: Any) -> Any:
    """The plain twin of a marked value: the same structure with the markers removed."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):  # only our own dicts get here: skip the slower ABC check
        return {_unmark(k): _unmark(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unmark(v) for v in value]
    return value


def _split_balanced(marked: str) -> Optional[list[tuple[str, bool]]]:
    """Segments of a marked string, or None when its markers do not pair up."""
    segments: list[tuple[str, bool]] = []
    depth = 0
    # The split alternates text, marker, text, marker, ... text.
    parts = _MARK_SPLIT.split(marked)
    for i in range(0, len(parts), 2):
        _append(segments, parts[i], depth == 0)
        if i + 1 == len(parts):
            break
        if parts[i + 1] == OPEN_MARK:
            depth += 1
        elif depth == 0:
            return None
        else:
            depth -= 1
    return segments if depth == 0 else None


def _append(segments: list[tuple[str, bool]], piece: str, trusted: bool) -> None:
    """Add a piece, merging with the previous one when trust is the same; skip empties."""
    if not piece:
        return
    if segments and segments[-1][1] == trusted:
        segments[-1] = (segments[-1][0] + piece, trusted)
    else:
        segments.append((piece, trusted))


def _segments(plain: str, marked: str) -> list[tuple[str, bool]]:
    """Cut the plain render into trusted/untrusted segments using the marked render.

    When the template treated marked text like plain text (the usual case) the markers give the
    exact split. When it did not (it sliced content and lost a marker, or branched on a
    ``startswith`` the marker changed), fall back to something coarse but safe: only the
    identical prefix before the first marker and suffix after the last one stay trusted.
    """
    exact = _split_balanced(marked)
    if exact is not None and "".join(piece for piece, _ in exact) == plain:
        return exact
    return _coarse_segments(plain, marked)


def _coarse_segments(plain: str, marked: str) -> list[tuple[str, bool]]:
    positions = [i for i, ch in enumerate(marked) if ch in (OPEN_MARK, CLOSE_MARK)]
    if not positions:
        head, tail = marked, ""
    else:
        head, tail = marked[: positions[0]], marked[positions[-1] + 1 :]
    prefix = _common_prefix(plain, head)
    suffix = _common_prefix(plain[prefix:][::-1], tail[::-1])
    segments: list[tuple[str, bool]] = []
    _append(segments, plain[:prefix], True)
    _append(segments, plain[prefix : len(plain) - suffix], False)
    _append(segments, plain[len(plain) - suffix :], True)
    return segments


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _checked_markup(marked: str, plain: str) -> str:
    """A format's rendering of marked input, if the markers came through intact; else the plain
    rendering marked as untrusted as a whole (a format that escaped or cut the markers)."""
    if _split_balanced(marked) is not None and _clean(marked) == plain:
        return marked
    return _mark(plain)


# ---------------------------------------------------------------- the sandbox

# Caps on what a template may build with * and **: a hostile template must not eat the worker.
_MAX_REPEAT = 1_000_000
_MAX_POWER_BITS = 100_000


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}`` (used by some HF templates to mark assistant
    text for training masks): render the body as is."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # Jinja returns an Undefined that only fails when used further (``{{ x.__class__ }}``
        # would print nothing); stop at the first attempt instead.
        raise UnsafeTemplateError(
            f"template tried to access an unsafe attribute {attribute!r} of a "
            f"{type(obj).__name__!r} object; chat templates run sandboxed"
        )

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        return super().call_binop(context, operator, left, right)


def _check_repeat(left: Any, right: Any) -> None:
    seq, n = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > _MAX_REPEAT:
        raise UnsafeTemplateError(f"template tried to build a sequence of {len(seq) * n} items")


def _check_power(left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, int) and right > 0:
        if abs(left) > 1 and right * abs(left).bit_length() > _MAX_POWER_BITS:
            raise UnsafeTemplateError("template tried to compute an oversized power")


def _tojson(
    value: Any,
    indent: Optional[int] = None,
    ensure_ascii: bool = False,
    separators: Optional[tuple[str, str]] = None,
    sort_keys: bool = False,
) -> str:
    """Plain JSON. Jinja's own tojson HTML-escapes < > & ', which would corrupt a prompt."""
    return json.dumps(
        value, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: Any = "") -> None:
    raise TemplateRaisedError(str(message))


def _strftime_now(fmt: str) -> str:
    return _dt.datetime.now().strftime(fmt)


_ENV: Optional[_Sandbox] = None


def _env() -> _Sandbox:
    """One sandbox for all templates: it holds only stateless filters and globals."""
    global _ENV
    if _ENV is None:
        # trim_blocks and lstrip_blocks as HF transformers sets them: templates are written so.
        env = _Sandbox(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=["jinja2.ext.loopcontrols", _GenerationTag],
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        _ENV = env
    return _ENV


# ---------------------------------------------------------------- probing
#
# Sentinels are odd enough never to be template text: a feature counts as supported only when
# the sample renders without error AND the sentinel shows up in the output.

_P_SYSTEM = "probe-system-4be1"
_P_USER = "probe-user-93c7"
_P_USER2 = "probe-user-0d5e"
_P_ASSISTANT = "probe-assistant-7a21"
_P_TOOL_NAME = "probe_tool_5e0b"
_P_ARG = "probe-argument-61d2"
_P_CALL_ID = "call_probe1"
_P_RESULT = "probe-result-2f9a"
_P_TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": _P_TOOL_NAME,
        "description": "A probe.",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    },
}


def _user(text: str = _P_USER) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str = _P_ASSISTANT) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _probe_call_turn(as_string: bool, empty_content: bool) -> dict[str, Any]:
    args: Any = {"x": _P_ARG}
    call = {"id": _P_CALL_ID, "type": "function", "function": {"name": _P_TOOL_NAME, "arguments": args}}
    if as_string:
        call["function"]["arguments"] = json.dumps(args)
    return {"role": "assistant", "content": "" if empty_content else None, "tool_calls": [call]}


def _probe_tool_turn(content: str = _P_RESULT) -> dict[str, Any]:
    return {"role": "tool", "content": content, "name": _P_TOOL_NAME, "tool_call_id": _P_CALL_ID}


# ---------------------------------------------------------------- the template


class ChatTemplate:
    """A compiled chat template; probe once, render many times (every loop iteration)."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", name: str = "chat_template"):
        self.source = source
        self.name = name
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self._template = _compile(source, name)
        self._capabilities: Optional[Capabilities] = None
        # Per tool-call format: does the template wrap tool results itself (hermes3 does)?
        self._wraps_results: dict[str, bool] = {}

    # -- loading

    @classmethod
    def from_file(cls, path: Union[str, Path], bos_token: str = "", eos_token: str = "") -> "ChatTemplate":
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
    ) -> "ChatTemplate":
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
        tools: Optional[Sequence[ToolDefinition]] = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render message dicts exactly as given, as HF's apply_chat_template would."""
        try:
            return self._template.render(
                messages=list(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError:
            raise
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template {self.name}{_line_of(e, self._filename)}: {e}") from None
        except Exception as e:  # a template is code: TypeError, KeyError... from its expressions
            raise TemplateError(
                f"chat template {self.name} failed{_line_of(e, self._filename)}: {type(e).__name__}: {e}"
            ) from None

    @property
    def _filename(self) -> str:
        return _filename_for(self.name)

    def _renders(self, messages: list[dict[str, Any]], *needles: str, tools: Optional[list] = None) -> bool:
        try:
            out = self.render_raw(messages, tools=tools, add_generation_prompt=True)
        except TemplateError:
            return False
        return all(n in out for n in needles)

    # -- capabilities

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self._probe()
        return self._capabilities

    def _probe(self) -> Capabilities:
        system = self._renders([{"role": "system", "content": _P_SYSTEM}, _user()], _P_SYSTEM, _P_USER)
        strict = not self._renders([_user(), _user(_P_USER2)], _P_USER, _P_USER2)
        call_shape = self._probe_call_shape()
        return Capabilities(
            system_role=system,
            tool_role=self._probe_tool_role(call_shape),
            tool_calls=call_shape is not None,
            renders_tools=self._probe_renders_tools(),
            strict_alternation=strict,
            tool_call_arguments_as_string=bool(call_shape and call_shape[0]),
            tool_call_content_empty_string=bool(call_shape and call_shape[1]),
        )

    def _probe_call_shape(self) -> Optional[tuple[bool, bool]]:
        """(arguments as string, content as "") of the first call shape the template renders."""
        for as_string in (False, True):
            for empty_content in (False, True):
                turn = _probe_call_turn(as_string, empty_content)
                if self._renders([_user(), turn], _P_TOOL_NAME, _P_ARG):
                    return as_string, empty_content
        return None

    def _tool_probe_conversations(self, call_shape: Optional[tuple[bool, bool]]) -> list[list[dict[str, Any]]]:
        # A tool turn normally follows the call it answers; some templates insist on it.
        candidates = [[_user(), _assistant(), _probe_tool_turn()]]
        if call_shape is not None:
            candidates.insert(0, [_user(), _probe_call_turn(*call_shape), _probe_tool_turn()])
        return candidates

    def _probe_tool_role(self, call_shape: Optional[tuple[bool, bool]]) -> bool:
        return any(self._renders(c, _P_RESULT) for c in self._tool_probe_conversations(call_shape))

    def _probe_renders_tools(self) -> bool:
        samples = ([_user()], [{"role": "system", "content": _P_SYSTEM}, _user()])
        return any(self._renders(list(s), _P_TOOL_NAME, tools=[_P_TOOL_SPEC]) for s in samples)

    def wraps_tool_results(self, fmt: ToolCallFormat) -> bool:
        """Whether the template already puts the format's wrapper (``<tool_response>``) around
        tool content, so that passing fmt.render_tool_result(...) would wrap it twice."""
        if fmt.name not in self._wraps_results:
            self._wraps_results[fmt.name] = self._probe_wraps(fmt)
        return self._wraps_results[fmt.name]

    def _probe_wraps(self, fmt: ToolCallFormat) -> bool:
        wrapped = fmt.render_tool_result(_P_TOOL_NAME, _P_CALL_ID, _P_RESULT)
        before = wrapped.split(_P_RESULT, 1)[0].strip()
        if not before or not self.capabilities.tool_role:
            return False
        opener = before.splitlines()[0].strip()
        for conversation in self._tool_probe_conversations(self._call_shape()):
            try:
                out = self.render_raw(conversation)
            except TemplateError:
                continue
            at = out.find(_P_RESULT)
            if at >= 0:
                # Look only just before the result: the template's own wrapper sits there.
                return opener in out[max(0, at - len(before) - 64) : at]
        return False

    def _call_shape(self) -> Optional[tuple[bool, bool]]:
        caps = self.capabilities
        if not caps.tool_calls:
            return None
        return caps.tool_call_arguments_as_string, caps.tool_call_content_empty_string

    # -- rendering a conversation

    def render(
        self,
        messages: Sequence[Union[Message, Mapping[str, Any]]],
        *,
        tools: Sequence[ToolDefinition],
        fmt: ToolCallFormat,
        add_generation_prompt: bool = True,
        prompt_variant: Optional[str] = None,
    ) -> RenderedPrompt:
        """The prompt for a conversation, adapted to what this template supports."""
        msgs = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        tools = [_clean_json(t) for t in tools or ()]
        adapter = _Adapter(self, fmt, tools, prompt_variant)
        marked = adapter.adapt(msgs)
        shown_tools = tools if (tools and self.capabilities.renders_tools) else None
        marked_text = self.render_raw(marked, tools=shown_tools, add_generation_prompt=add_generation_prompt)
        plain_text = self.render_raw(_unmark(marked), tools=shown_tools, add_generation_prompt=add_generation_prompt)
        return RenderedPrompt(text=plain_text, segments=_segments(plain_text, marked_text))

    def __repr__(self) -> str:
        return f"ChatTemplate({self.name!r})"


def available_templates() -> list[str]:
    return sorted(p.stem for p in TEMPLATES_DIR.glob("*.j2"))


def _filename_for(name: str) -> str:
    return f"<chat template {name}>"


def _compile(source: str, name: str) -> jinja2.Template:
    """Compile once; a syntax error names the line, as template authors count lines."""
    env = _env()
    try:
        code = env.compile(source, name=name, filename=_filename_for(name))
    except jinja2.TemplateSyntaxError as e:
        raise TemplateSyntaxError(f"chat template {name} does not compile: line {e.lineno}: {e.message}") from None
    return env.template_class.from_code(env, code, env.make_globals(None), None)


def _line_of(error: BaseException, filename: str) -> str:
    """' at line N' from the innermost traceback frame in the template, if there is one.

    Jinja rewrites tracebacks so template frames carry the template's own line numbers.
    """
    lineno = getattr(error, "lineno", None)
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return f" at line {lineno}" if lineno else ""


# ---------------------------------------------------------------- adaptation


class _Adapter:
    """Turns protocol messages into marked message dicts this template can render."""

    def __init__(self, template: ChatTemplate, fmt: ToolCallFormat, tools: list[ToolDefinition], variant: Optional[str]):
        self.template = template
        self.caps = template.capabilities
        self.fmt = fmt
        self.tools = tools
        self.variant = variant

    def adapt(self, messages: list[Message]) -> list[dict[str, Any]]:
        names = _call_names(messages)
        leading, rest = _split_leading_system(messages)
        turns = [self._turn(m, names) for m in rest]
        turns = self._place_system(self._system_text(leading), turns)
        if self.caps.strict_alternation:
            turns = _merge_same_roles(turns)
        return turns

    # -- system prompt

    def _system_text(self, leading: list[Message]) -> str:
        """Tool instructions first (the same for every job with these tools, so the prompt
        prefix stays reusable across jobs), then the conversation's own system text."""
        parts = []
        if self.tools and not self.caps.renders_tools:
            parts.append(_clean(self.fmt.system_prompt(self.tools, self.variant)))
        parts.extend(_mark(m.content or "") for m in leading)
        return "\n\n".join(p for p in parts if p.strip())

    def _place_system(self, system: str, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not system:
            return turns
        if self.caps.system_role:
            return [{"role": "system", "content": system}, *turns]
        # No system role: the text opens the first user turn (one is made if the chat has none).
        if turns and turns[0]["role"] == "user":
            first = dict(turns[0], content=_join(system, turns[0]["content"]))
            return [first, *turns[1:]]
        return [{"role": "user", "content": system}, *turns]

    # -- one message

    def _turn(self, m: Message, names: dict[str, str]) -> dict[str, Any]:
        if m.role == "assistant":
            return self._assistant_turn(m)
        if m.role == "tool":
            return self._tool_turn(m, names)
        # A system message after the start: kept where the template can take it mid-chat.
        role = m.role
        if role == "system" and (not self.caps.system_role or self.caps.strict_alternation):
            role = "user"
        return {"role": role, "content": _mark(m.content or "")}

    def _assistant_turn(self, m: Message) -> dict[str, Any]:
        content = _mark(m.content) if m.content is not None else None
        if not m.tool_calls:
            return {"role": "assistant", "content": self._final_text(m.content or "")}
        if not self.caps.tool_calls:
            return {"role": "assistant", "content": _join(content or "", self._inline_calls(m.tool_calls), "\n")}
        if content is None and self.caps.tool_call_content_empty_string:
            content = ""
        return {"role": "assistant", "content": content, "tool_calls": [self._call_dict(c) for c in m.tool_calls]}

    def _final_text(self, content: str) -> str:
        """An answer as the format would have the model write it. Styles where even answers are
        structured (thoughtful_steps: a JSON "result") offer ``render_final``; showing earlier
        answers that way keeps the transcript consistent with what the grammar asks for."""
        render_final = getattr(self.fmt, "render_final", None)
        if render_final is None or not content.strip():
            return _mark(content)
        return _checked_markup(render_final(_mark(content)), render_final(_clean(content)))

    def _call_dict(self, call: ToolCall) -> dict[str, Any]:
        args = _mark_json(call.arguments)
        if self.caps.tool_call_arguments_as_string:
            args = json.dumps(args, ensure_ascii=False)  # markers are not ASCII: they survive
        return {"id": _mark(call.id), "type": "function", "function": {"name": _mark(call.name), "arguments": args}}

    def _inline_calls(self, calls: Sequence[ToolCall]) -> str:
        """The calls in the format's own syntax: its markup trusted, names and values not."""
        plain = self.fmt.render_tool_calls([_copy_call(c, _clean, _clean_json) for c in calls])
        marked = self.fmt.render_tool_calls([_copy_call(c, _mark, _mark_json) for c in calls])
        return _checked_markup(marked, plain)

    def _tool_turn(self, m: Message, names: dict[str, str]) -> dict[str, Any]:
        name = m.name or names.get(m.tool_call_id or "", "") or "tool"
        call_id = m.tool_call_id or ""
        if self.caps.tool_role:
            raw = self.template.wraps_tool_results(self.fmt)
            content = _mark(m.content or "") if raw else self._result_text(name, call_id, m.content or "")
            return {"role": "tool", "content": content, "name": _mark(name), "tool_call_id": _mark(call_id)}
        return {"role": "user", "content": self._result_text(name, call_id, m.content or "")}

    def _result_text(self, name: str, call_id: str, content: str) -> str:
        plain = self.fmt.render_tool_result(_clean(name), _clean(call_id), _clean(content))
        marked = self.fmt.render_tool_result(_mark(name), _mark(call_id), _mark(content))
        return _checked_markup(marked, plain)


def _copy_call(call: ToolCall, text: Any, obj: Any) -> ToolCall:
    """A ToolCall with its strings passed through text/obj; model_construct because markers may
    push a name past the protocol's length limit and this copy is never sent anywhere."""
    function = FunctionCall.model_construct(name=text(call.name), arguments=obj(call.arguments))
    return ToolCall.model_construct(id=text(call.id), type="function", function=function)


def _call_names(messages: Iterable[Message]) -> dict[str, str]:
    """call id -> tool name, so a tool message without a name can still be labelled."""
    return {c.id: c.name for m in messages for c in (m.tool_calls or ())}


def _split_leading_system(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return messages[:n], messages[n:]


def _join(first: Optional[str], second: Optional[str], sep: str = "\n\n") -> str:
    return sep.join(p for p in (first, second) if p)


def _merge_same_roles(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive same-role turns, for templates that raise on anything but alternation
    (two tool results in a row became two user turns)."""
    merged: list[dict[str, Any]] = []
    for turn in turns:
        if merged and merged[-1]["role"] == turn["role"]:
            prev = merged[-1]
            combined = dict(prev, content=_join(prev.get("content"), turn.get("content")))
            calls = (prev.get("tool_calls") or []) + (turn.get("tool_calls") or [])
            if calls:
                combined["tool_calls"] = calls
            merged[-1] = combined
        else:
            merged.append(turn)
    return merged
