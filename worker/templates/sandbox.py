"""The Jinja sandbox chat templates are compiled and run in; errors name the template's line.

A template from a GGUF's metadata is code we did not write: it runs in Jinja's immutable
sandbox, any reach for Python internals fails with our error instead of running, and ``*`` and
``**`` are capped so a hostile template cannot eat the worker. The filters and globals are the
ones HF transformers gives templates (``tojson``, ``raise_exception``, ``strftime_now``, the
``{% generation %}`` tag).
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from worker.templates.errors import TemplateError, TemplateRaisedError, TemplateSyntaxError, UnsafeTemplateError

# Caps on what a template may build with * and **.
_MAX_REPEAT = 1_000_000
_MAX_POWER_BITS = 100_000


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}`` (used by some HF templates to mark assistant
    text for training masks): render the body as is."""

    tags = {"generation"}  # noqa: RUF012  # jinja2.ext.Extension declares tags as a plain attribute

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
    indent: int | None = None,
    ensure_ascii: bool = False,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Plain JSON. Jinja's own tojson HTML-escapes < > & ', which would corrupt a prompt."""
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: Any = "") -> None:
    raise TemplateRaisedError(str(message))


def _strftime_now(fmt: str) -> str:
    return _dt.datetime.now().strftime(fmt)


_ENV: _Sandbox | None = None


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


def compile_template(source: str, name: str) -> jinja2.Template:
    """Compile once; a syntax error names the line, as template authors count lines."""
    env = _env()
    try:
        code = env.compile(source, name=name, filename=_filename_for(name))
    except jinja2.TemplateSyntaxError as e:
        raise TemplateSyntaxError(f"chat template {name} does not compile: line {e.lineno}: {e.message}") from None
    return env.template_class.from_code(env, code, env.make_globals(None), None)


def undeclared_variables(source: str) -> set[str]:
    """The names a template reads from its context (``functions``, ``tools``...), from its source;
    empty for a source that does not parse (compile_template reports that)."""
    try:
        return set(meta.find_undeclared_variables(_env().parse(source)))
    except jinja2.TemplateSyntaxError:
        return set()


def run_template(template: jinja2.Template, name: str, **context: Any) -> str:
    """Render a compiled template; whatever goes wrong is a TemplateError naming the line."""
    try:
        return template.render(**context)
    except TemplateError:
        raise
    except jinja2.TemplateError as e:
        raise TemplateError(f"chat template {name}{_line_of(e, _filename_for(name))}: {e}") from None
    except Exception as e:  # a template is code: TypeError, KeyError... from its expressions
        raise TemplateError(
            f"chat template {name} failed{_line_of(e, _filename_for(name))}: {type(e).__name__}: {e}"
        ) from None


def _filename_for(name: str) -> str:
    # The filename a template's code is compiled under, so that its frames can be found again.
    return f"<chat template {name}>"


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
