"""The tool registry: ``@tool``, JSON schema from type hints, validation, execution with timeout.

A tool is a plain Python function, sync or async. Registering it builds a pydantic model from its
signature; that model gives the JSON schema shown to the model (OpenAI function shape) and does the
validation of the arguments the model wrote. Validation is strict (``"5"`` is not an integer, a
bool is not an integer) because silently coercing hides the model's mistakes; the error texts are
written for the model to read and correct itself.

Tool modules register on the module-level ``REGISTRY``::

    from worker.tools import tool

    @tool
    def get_time(zone: str) -> str:
        \"\"\"Current time in a time zone.\"\"\"
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import enum
import importlib
import inspect
import json
import re
import threading
import time
import traceback
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

__all__ = [
    "REGISTRY",
    "Tool",
    "ToolLoadError",
    "ToolOutcome",
    "ToolRegistrationError",
    "ToolRegistry",
    "UnknownToolError",
    "load_tool_modules",
    "tool",
]

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_S = 30.0
# Sync tools each get a daemon thread; a tool that hangs keeps its thread forever, so cap how many
# may be alive at once rather than let a misbehaving tool exhaust the process.
DEFAULT_MAX_THREADS = 32
# OpenAI's rule for function names; it also keeps names safe inside GBNF string literals.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION_RE = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns?|Raises|Yields?|Examples?|Notes?|See Also)\s*:\s*$",
    re.IGNORECASE,
)
_ARGS_HEADERS = {"args", "arguments", "parameters", "params"}
_ARG_LINE_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ToolRegistrationError(ValueError):
    """A function cannot be registered as a tool (bad signature, duplicate name, ...)."""


class ToolLoadError(ImportError):
    """A tool module named in the settings could not be imported."""


class UnknownToolError(KeyError):
    """Names asked for are not registered. ``names`` lists the unknown ones."""

    def __init__(self, names: Iterable[str], known: Iterable[str]):
        self.names = list(names)
        self.known = list(known)
        super().__init__(self.names)

    def __str__(self) -> str:  # KeyError's own str() would repr-quote the message
        unknown = ", ".join(repr(n) for n in self.names)
        known = ", ".join(self.known) or "(none)"
        return f"unknown tool(s) {unknown}; registered tools: {known}"


@dataclass(frozen=True)
class ToolOutcome:
    """What running one call produced. On failure ``content`` carries the same text as ``error``,
    so the loop can feed it back to the model as the tool response either way."""

    ok: bool
    content: str
    error: Optional[str]
    duration_ms: float


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    is_async: bool
    parameters: dict[str, Any]  # the cleaned JSON schema of the arguments object
    timeout_s: Optional[float]
    model: type[BaseModel] = dataclasses.field(repr=False)
    # internal pydantic field name -> the function's parameter name (see _build_model for why)
    field_names: dict[str, str] = dataclasses.field(repr=False)

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec; a fresh copy, so callers may mutate it."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def signature_text(self) -> str:
        """e.g. ``zorb (integer, required), mode (one of "add","sub", default "add")``."""
        required = set(self.parameters.get("required", []))
        parts = []
        for arg, schema in self.parameters.get("properties", {}).items():
            if arg in required:
                tail = "required"
            elif "default" in schema:
                tail = "default " + _json(schema["default"])
            else:
                tail = "optional"
            parts.append(f"{arg} ({_type_name(schema)}, {tail})")
        return ", ".join(parts) or "no arguments"


# ---------------------------------------------------------------------------------------------
# Docstrings


def _doc_summary(doc: str) -> str:
    """The first paragraph, joined into one line; a section header (``Args:``) also ends it."""
    lines = []
    for line in doc.splitlines():
        if not line.strip() or _SECTION_RE.match(line):
            if lines:
                break
            continue
        lines.append(line.strip())
    return " ".join(lines)


def _doc_arg_descriptions(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section (continuation lines joined)."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        header = _SECTION_RE.match(lines[i])
        i += 1
        if not header or header.group(1).lower() not in _ARGS_HEADERS:
            continue
        header_indent = _indent(lines[i - 1])
        entry_indent: Optional[int] = None
        current: Optional[str] = None
        while i < len(lines):
            line = lines[i]
            if line.strip():
                indent = _indent(line)
                if indent <= header_indent:
                    break  # the section ended
                if entry_indent is None:
                    entry_indent = indent
                match = _ARG_LINE_RE.match(line.strip()) if indent == entry_indent else None
                if match:
                    current = match.group(1)
                    out[current] = match.group(2).strip()
                elif current is not None:
                    out[current] = (out[current] + " " + line.strip()).strip()
            i += 1
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


# ---------------------------------------------------------------------------------------------
# Building the model and the schema


def _type_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # a forward reference that cannot be resolved, typically
        raise ToolRegistrationError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc


def _build_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], dict[str, str]]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolRegistrationError(f"tool {name!r}: cannot read the signature: {exc}") from exc
    hints = _type_hints(fn, name)
    fields: dict[str, Any] = {}
    field_names: dict[str, str] = {}
    for i, param in enumerate(sig.parameters.values()):
        _check_param(param, name, hints)
        # Internal names are neutral and the real name is the alias: parameters called ``json``,
        # ``schema`` or ``_x`` would otherwise clash with BaseModel or be refused by pydantic.
        internal = f"p{i}"
        field_names[internal] = param.name
        fields[internal] = _field(param, hints[param.name])
    config = ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=False)
    try:
        model = create_model(f"{name}_arguments", __config__=config, **fields)
    except Exception as exc:
        raise ToolRegistrationError(f"tool {name!r}: unsupported parameter types: {exc}") from exc
    return model, field_names


def _check_param(param: inspect.Parameter, name: str, hints: dict[str, Any]) -> None:
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        star = "*" if param.kind is param.VAR_POSITIONAL else "**"
        raise ToolRegistrationError(
            f"tool {name!r}: parameter {star}{param.name} is not allowed; a tool takes named "
            "arguments only (the model sends a JSON object)"
        )
    if param.kind is param.POSITIONAL_ONLY:
        raise ToolRegistrationError(
            f"tool {name!r}: parameter {param.name!r} is positional-only; tools are called with "
            "keyword arguments"
        )
    if param.name not in hints:
        raise ToolRegistrationError(
            f"tool {name!r}: parameter {param.name!r} has no type hint; the schema needs one"
        )


def _field(param: inspect.Parameter, hint: Any) -> tuple[Any, FieldInfo]:
    default = param.default
    if isinstance(default, FieldInfo):
        # ``x: int = Field(5, description=...)``: keep the user's Field, add our alias around it.
        return typing.Annotated[hint, default], Field(alias=param.name)
    if default is inspect.Parameter.empty:
        return hint, Field(alias=param.name)
    return hint, Field(default, alias=param.name)


def _clean_schema(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """Inline $refs, drop titles, and simplify ``Optional[X] = None`` to X (not required)."""
    defs = raw.get("$defs", {})
    props = {}
    for arg, schema in raw.get("properties", {}).items():
        props[arg] = _order_keys(_simplify_optional(_inline(schema, defs, (), name)))
    return {"type": "object", "properties": props, "required": list(raw.get("required", []))}


def _inline(node: Any, defs: dict[str, Any], seen: tuple[str, ...], name: str) -> Any:
    if isinstance(node, list):
        return [_inline(x, defs, seen, name) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        key = ref.rsplit("/", 1)[1]
        if key in seen:
            # A self-containing schema cannot be inlined, and the grammar builder cannot loop.
            raise ToolRegistrationError(f"tool {name!r}: recursive type {key!r} is not supported")
        out.update(_inline(defs[key], defs, seen + (key,), name))
    for key, value in node.items():
        if key in ("$ref", "$defs", "title"):
            continue
        if key == "properties" and isinstance(value, dict):
            # Keys here are field names (a field may be called "title"), not schema keywords.
            out[key] = {k: _inline(v, defs, seen, name) for k, v in value.items()}
        else:
            out[key] = _inline(value, defs, seen, name)
    return out


def _simplify_optional(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if not (isinstance(options, list) and "default" in schema and schema["default"] is None):
        return schema
    non_null = [o for o in options if o != {"type": "null"}]
    if len(non_null) != 1 or len(non_null) == len(options):
        return schema
    # Leaving the argument out already means None; showing "null" to a small model only invites
    # it to write null everywhere. Validation still accepts an explicit null.
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    return {**non_null[0], **rest}


_KEY_ORDER = ("type", "description", "enum", "const", "items", "properties", "required", "default")


def _order_keys(schema: dict[str, Any]) -> dict[str, Any]:
    """type and description first: the schema is read by small models, top to bottom."""
    ordered = {k: schema[k] for k in _KEY_ORDER if k in schema}
    ordered.update({k: v for k, v in schema.items() if k not in ordered})
    return ordered


def _make_tool(
    fn: Callable[..., Any],
    name: Optional[str],
    description: Optional[str],
    timeout_s: Optional[float],
) -> Tool:
    if not callable(fn):
        raise ToolRegistrationError(f"@tool needs a function, got {type(fn).__name__}")
    tool_name = name or getattr(fn, "__name__", None) or type(fn).__name__
    if not _NAME_RE.match(tool_name):
        raise ToolRegistrationError(
            f"tool name {tool_name!r} is invalid: use 1-64 letters, digits, '_' or '-'"
        )
    if timeout_s is not None and not timeout_s > 0:
        raise ToolRegistrationError(f"tool {tool_name!r}: timeout_s must be > 0, got {timeout_s}")
    doc = inspect.cleandoc(inspect.getdoc(fn) or "")
    model, field_names = _build_model(fn, tool_name)
    try:
        raw = model.model_json_schema(by_alias=True)
    except Exception as exc:
        raise ToolRegistrationError(f"tool {tool_name!r}: no JSON schema for its types: {exc}") from exc
    parameters = _clean_schema(raw, tool_name)
    for arg, text in _doc_arg_descriptions(doc).items():
        prop = parameters["properties"].get(arg)
        if prop is not None and "description" not in prop:  # an explicit Field description wins
            parameters["properties"][arg] = _order_keys({**prop, "description": text})
    return Tool(
        name=tool_name,
        description=description if description is not None else _doc_summary(doc),
        fn=fn,
        is_async=_is_async(fn),
        parameters=parameters,
        timeout_s=timeout_s,
        model=model,
        field_names=field_names,
    )


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    )


# ---------------------------------------------------------------------------------------------
# Describing types and values for error messages


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


_SIMPLE_NAMES = {"integer": "integer", "number": "number", "string": "string",
                 "boolean": "boolean", "object": "object", "null": "null", "array": "array"}
_PLURALS = {"integer": "integers", "number": "numbers", "string": "strings",
            "boolean": "booleans", "object": "objects", "array": "arrays"}


def _type_name(schema: dict[str, Any]) -> str:
    """A short name: ``integer``, ``array of strings``, ``one of "a","b"``."""
    if "enum" in schema:
        return "one of " + ",".join(_json(v) for v in schema["enum"])
    if "const" in schema:
        return "exactly " + _json(schema["const"])
    if "anyOf" in schema:
        return " or ".join(_type_name(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), dict):
        item = _type_name(schema["items"])
        return "array of " + _PLURALS.get(item, f"({item})")
    if isinstance(kind, str):
        return _SIMPLE_NAMES.get(kind, kind)
    return "any value"


def _expected(schema: dict[str, Any]) -> str:
    """The type name with an article, for "must be ..."."""
    if "anyOf" in schema:
        return " or ".join(_expected(s) for s in schema["anyOf"])
    text = _type_name(schema)
    if text == "boolean":
        return "a boolean (true or false)"
    if text.startswith(("one of", "exactly", "any value", "null")):
        return text
    return ("an " if text[0] in "aeiou" else "a ") + text


def _describe_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "the boolean " + ("true" if value else "false")
    if isinstance(value, (int, float)):
        return f"the number {_json(value)}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return "the string " + _json(shown)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def _is_type_error(kind: str) -> bool:
    return (
        kind.endswith(("_type", "_parsing"))
        or kind in {"literal_error", "enum", "int_from_float", "none_required"}
    )


_MISSING = object()


def _locate(parameters: dict[str, Any], arguments: Any, loc: tuple[Any, ...]):
    """Walk an error location through the schema and the arguments together.

    Returns (readable path like ``items[2].x``, schema there, value there). The walk stops at a
    union, whose pydantic locations carry one member tag per alternative: the error is reported
    once, at the union, with all alternatives as the expectation.
    """
    schema: dict[str, Any] = parameters
    value: Any = arguments
    path = ""
    for step in loc:
        if "anyOf" in schema:
            break
        props = schema.get("properties") or {}
        if isinstance(step, str) and step in props:
            schema = props[step]
            path = f"{path}.{step}" if path else step
        elif isinstance(step, str) and isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
            path = f"{path}.{step}" if path else step
        elif isinstance(step, int) and isinstance(schema.get("items"), dict):
            schema = schema["items"]
            path = f"{path}[{step}]"
        else:
            break
        value = _step_into(value, step)
    return path, schema, value


def _step_into(value: Any, step: Any) -> Any:
    try:
        return value[step]
    except (KeyError, IndexError, TypeError):
        return _MISSING


# ---------------------------------------------------------------------------------------------
# Running sync tools


class _ToolThreads:
    """Runs sync tools, one daemon thread per call.

    Not asyncio's default executor: a hung tool there would starve everything else using it.
    Not a ThreadPoolExecutor either: its workers are joined at interpreter exit, so one tool stuck
    forever would stop the worker process from ever shutting down. Daemon threads are abandoned
    at exit; a cap bounds how many stuck ones may pile up.
    """

    def __init__(self, max_threads: int):
        self.max_threads = max_threads
        self._running = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        return self._running

    async def run(self, name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        # Carry context variables (structlog's bound job_id, say) into the tool's thread.
        ctx = contextvars.copy_context()
        with self._lock:
            if self._running >= self.max_threads:
                raise RuntimeError(
                    f"{self._running} earlier tool calls are still running (the limit is "
                    f"{self.max_threads}); try again later"
                )
            self._running += 1

        def target() -> None:
            try:
                result, error = ctx.run(fn, **kwargs), None
            except Exception as exc:
                result, error = None, exc
            except BaseException as exc:  # SystemExit in a tool must not reach the event loop
                result, error = None, RuntimeError(f"{type(exc).__name__} raised in the tool")
            finally:
                with self._lock:
                    self._running -= 1
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:
                pass  # the loop closed while the tool ran; nobody is waiting any more

        threading.Thread(target=target, name=f"toolq-tool-{name}", daemon=True).start()
        return await future


def _settle(future: asyncio.Future[Any], result: Any, error: Optional[BaseException]) -> None:
    if future.done():  # timed out or cancelled meanwhile: the result has nowhere to go
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _raised_at(exc: BaseException) -> str:
    """The innermost frame, as ``file:line in func``. Not the whole traceback: a failing tool is
    an ordinary event (the model passed a bad value), and rendering tracebacks is slow and noisy."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def _to_jsonable(value: Any) -> Any:
    """``default=`` for json.dumps: pydantic models, dataclasses and enums by value, else str."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return list(value)
    return str(value)


def _render_result(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=_to_jsonable, ensure_ascii=False, separators=(",", ":"))


class _TimedOut(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The registry


class ToolRegistry:
    def __init__(
        self,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        max_threads: int = DEFAULT_MAX_THREADS,
    ):
        self.default_timeout_s = default_timeout_s
        self._tools: dict[str, Tool] = {}  # dicts keep insertion order: registration order
        self._threads = _ToolThreads(max_threads)

    # -- registering -------------------------------------------------------------------------

    def tool(
        self,
        fn: Optional[Callable[..., Any]] = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        timeout_s: Optional[float] = None,
    ) -> Any:
        """Decorator: ``@registry.tool`` or ``@registry.tool(name=..., timeout_s=...)``.

        Returns the function unchanged, so it stays directly callable in tests.
        """
        if fn is None:
            return lambda f: self.tool(f, name=name, description=description, timeout_s=timeout_s)
        self.register(fn, name=name, description=description, timeout_s=timeout_s)
        return fn

    def register(
        self,
        fn: Callable[..., Any],
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        timeout_s: Optional[float] = None,
    ) -> Tool:
        new = _make_tool(fn, name, description, timeout_s)
        existing = self._tools.get(new.name)
        if existing is not None:
            where = f"{getattr(existing.fn, '__module__', '?')}.{getattr(existing.fn, '__qualname__', '?')}"
            raise ToolRegistrationError(f"a tool named {new.name!r} is already registered ({where})")
        self._tools[new.name] = new
        return new

    # -- looking up --------------------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError([name], self._tools) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self, names: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
        """OpenAI function specs: all tools in registration order, or the named ones in the order
        given (duplicates dropped). Unknown names raise UnknownToolError listing all of them."""
        return [t.spec() for t in self._select(names)]

    def subset(self, names: Optional[Iterable[str]]) -> "ToolRegistry":
        """A registry holding only the named tools (all when None), for one job: its specs,
        validation and execution see just those, so a call to any other tool is "unknown".
        It shares this registry's tool threads and their cap."""
        view = ToolRegistry(default_timeout_s=self.default_timeout_s)
        view._threads = self._threads
        view._tools = {t.name: t for t in self._select(names)}
        return view

    def _select(self, names: Optional[Iterable[str]]) -> list[Tool]:
        if names is None:
            return list(self._tools.values())
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise UnknownToolError(unknown, self._tools)
        return [self._tools[n] for n in wanted]

    # -- validating --------------------------------------------------------------------------

    def validate(self, name: str, arguments: Any) -> list[str]:
        """Problems with a call, written for the model to fix; empty when the call is valid."""
        return self._check(name, arguments)[0]

    def _check(self, name: str, arguments: Any) -> tuple[list[str], Optional[dict[str, Any]]]:
        """(errors, keyword arguments with the validated, coerced values)."""
        found = self._tools.get(name)
        if found is None:
            available = ", ".join(self._tools) or "(none)"
            return [f"unknown tool {name!r}; available tools: {available}"], None
        if not isinstance(arguments, dict):
            return [f"arguments for {name!r} must be a JSON object, got {_describe_value(arguments)}"], None
        try:
            # JSON input on purpose: in strict mode it takes enum values and date strings as JSON
            # would carry them, while still refusing "5" for an integer and true for a number.
            data = json.dumps(arguments, default=str, ensure_ascii=False)
            instance = found.model.model_validate_json(data, strict=True)
        except ValidationError as exc:
            return _messages(found, arguments, exc), None
        kwargs = {real: getattr(instance, internal) for internal, real in found.field_names.items()}
        return [], kwargs

    # -- executing ---------------------------------------------------------------------------

    async def execute(
        self, name: str, arguments: Any, *, timeout_s: Optional[float] = None
    ) -> ToolOutcome:
        """Validate and run one call. Never raises, except asyncio.CancelledError (so the job
        can be cancelled while a tool runs)."""
        started = time.perf_counter()

        def outcome(ok: bool, content: str) -> ToolOutcome:
            elapsed = (time.perf_counter() - started) * 1000.0
            return ToolOutcome(ok=ok, content=content, error=None if ok else content, duration_ms=elapsed)

        errors, kwargs = self._check(name, arguments)
        if errors or kwargs is None:
            return outcome(False, "\n".join(errors))
        found = self._tools[name]
        limit = found.timeout_s or timeout_s or self.default_timeout_s
        try:
            ok, value = await self._run_with_timeout(found, kwargs, limit)
        except _TimedOut:
            result = outcome(False, f"tool {name!r} timed out after {limit:g} s")
            log.warning("tool_timeout", tool=name, timeout_s=limit)
            return result
        if not ok:
            # The outcome first: rendering a traceback must not count as the tool's time.
            result = outcome(False, f"tool {name!r} failed: {type(value).__name__}: {value}")
            log.warning("tool_failed", tool=name, error=result.error, where=_raised_at(value))
            return result
        try:
            return outcome(True, _render_result(value))
        except (TypeError, ValueError) as exc:  # e.g. a circular structure
            return outcome(False, f"tool {name!r} returned a result that is not JSON: {exc}")

    async def _run_with_timeout(
        self, found: Tool, kwargs: dict[str, Any], limit: float
    ) -> tuple[bool, Any]:
        # asyncio.wait, not wait_for: wait_for waits for the cancelled tool to finish, and an
        # async tool that swallows cancellation would then hang the job past its timeout.
        task = asyncio.ensure_future(self._invoke(found, kwargs))
        try:
            done, _ = await asyncio.wait({task}, timeout=limit)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()  # an async tool stops; a sync tool's thread cannot be stopped, it is abandoned
            raise _TimedOut
        return task.result()

    async def _invoke(self, found: Tool, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """(True, result) or (False, exception). Catching here keeps a TimeoutError raised by the
        tool itself apart from our own timeout."""
        try:
            if found.is_async:
                return True, await found.fn(**kwargs)
            return True, await self._threads.run(found.name, found.fn, kwargs)
        except Exception as exc:  # CancelledError is a BaseException: it passes through
            return False, exc


def _messages(found: Tool, arguments: dict[str, Any], exc: ValidationError) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    unknown: list[str] = []
    for err in exc.errors():
        kind = err["type"]
        path, schema, value = _locate(found.parameters, arguments, tuple(err["loc"]))
        if value is _MISSING:
            value = err.get("input")
        if kind == "extra_forbidden":
            unknown.append(path or ".".join(str(p) for p in err["loc"]))
            continue
        if kind == "missing":
            text = f"missing required argument {path!r} ({_expected(schema)})"
        elif _is_type_error(kind):
            text = f"argument {path!r} must be {_expected(schema)}, got {_describe_value(value)}"
        else:  # a constraint such as ge=0 or max_length: pydantic's wording is clear enough
            msg = err["msg"]
            msg = msg[len("Input "):] if msg.startswith("Input ") else f"is invalid: {msg}"
            text = f"argument {path!r} {msg}, got {_describe_value(value)}"
        if text not in seen:  # a union reports once per alternative; say it once
            seen.add(text)
            out.append(text)
    if unknown:
        listed = ", ".join(repr(u) for u in unknown)
        noun = "argument" if len(unknown) == 1 else "arguments"
        out.append(f"unknown {noun} {listed}; {found.name} takes: {found.signature_text()}")
    return out


# ---------------------------------------------------------------------------------------------
# The process-wide registry that tool modules decorate into

REGISTRY = ToolRegistry()
tool = REGISTRY.tool


def load_tool_modules(modules: Iterable[str]) -> ToolRegistry:
    """Import each module so its ``@tool`` decorators run; return the global REGISTRY.

    Importing is idempotent: a module already imported is not run (nor registered) twice.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise ToolLoadError(
                f"cannot load tool module {module!r}: {type(exc).__name__}: {exc}"
            ) from exc
    return REGISTRY
