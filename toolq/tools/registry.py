"""The registry: tools by name, their specs, checking and running calls; the process-wide REGISTRY.

A call is checked once (``check``) and the checked call is what runs (``run``); ``execute`` does
both for callers that have nothing to do in between.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Any

from toolq.tools.effects import CallContext
from toolq.tools.errors import ToolLoadError, ToolRegistrationError, UnknownToolError
from toolq.tools.execution import run_call
from toolq.tools.function import Tool, make_tool
from toolq.tools.messages import unknown_tool
from toolq.tools.results import ToolOutcome
from toolq.tools.threads import DEFAULT_MAX_THREADS, ToolThreads
from toolq.tools.validation import CheckedCall, check_arguments

__all__ = ["DEFAULT_TIMEOUT_S", "REGISTRY", "ToolRegistry", "load_tool_modules", "tool"]

DEFAULT_TIMEOUT_S = 30.0


class ToolRegistry:
    def __init__(
        self,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        max_threads: int = DEFAULT_MAX_THREADS,
    ):
        self.default_timeout_s = default_timeout_s
        self._tools: dict[str, Tool] = {}  # dicts keep insertion order: registration order
        self._threads = ToolThreads(max_threads)

    # -- registering -------------------------------------------------------------------------

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        requires_approval: bool = False,
        idempotent: bool | None = None,
    ) -> Any:
        """Decorator: ``@registry.tool`` or ``@registry.tool(name=..., timeout_s=..., requires_approval=True)``.
        ``idempotent=True`` declares that running a call again under the same effect key has no
        second effect, so a call a lost worker left with an unknown outcome is run again.

        Returns the function unchanged, so it stays directly callable in tests.
        """
        terms: dict[str, Any] = {
            "name": name,
            "description": description,
            "timeout_s": timeout_s,
            "requires_approval": requires_approval,
            "idempotent": idempotent,
        }
        if fn is None:
            return lambda f: self.tool(f, **terms)
        self.register(fn, **terms)
        return fn

    def register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        requires_approval: bool = False,
        idempotent: bool | None = None,
    ) -> Tool:
        new = make_tool(fn, name, description, timeout_s, requires_approval, idempotent)
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

    def specs(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI function specs: all tools in registration order, or the named ones in the order
        given (duplicates dropped). Unknown names raise UnknownToolError listing all of them."""
        return [t.spec() for t in self._select(names)]

    def subset(self, names: Iterable[str] | None) -> ToolRegistry:
        """A registry holding only the named tools (all when None), for one job: its specs,
        validation and execution see just those, so a call to any other tool is "unknown".
        It shares this registry's tool threads and their cap."""
        view = ToolRegistry(default_timeout_s=self.default_timeout_s)
        view._threads = self._threads
        view._tools = {t.name: t for t in self._select(names)}
        return view

    def _select(self, names: Iterable[str] | None) -> list[Tool]:
        if names is None:
            return list(self._tools.values())
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise UnknownToolError(unknown, self._tools)
        return [self._tools[n] for n in wanted]

    # -- checking and running calls ----------------------------------------------------------

    def check(self, name: str, arguments: Any) -> CheckedCall:
        """The call checked against this registry: errors for the model, or the values to run."""
        found = self._tools.get(name)
        if found is None:
            return CheckedCall(name, None, [unknown_tool(name, self._tools)], None)
        return check_arguments(found, arguments)

    def validate(self, name: str, arguments: Any) -> list[str]:
        """Problems with a call, written for the model to fix; empty when the call is valid."""
        return self.check(name, arguments).errors

    async def run(
        self, call: CheckedCall, *, timeout_s: float | None = None, context: CallContext | None = None
    ) -> ToolOutcome:
        """Run a checked call; one with errors is not run, its outcome carries the errors.
        Never raises, except asyncio.CancelledError (so the job can be cancelled while a tool
        runs). The tool's own timeout wins over ``timeout_s``, which wins over the default.
        ``context``: the call as the tool sees it (``current_call()``: its effect key)."""
        if call.errors or call.tool is None or call.kwargs is None:
            text = "\n".join(call.errors)
            return ToolOutcome(ok=False, content=text, error=text, duration_ms=0.0)
        limit = call.tool.timeout_s or timeout_s or self.default_timeout_s
        if context is not None and context.timeout_s is None:
            context = dataclasses.replace(context, timeout_s=limit)
        return await run_call(call.tool, call.kwargs, limit, self._threads, context)

    async def execute(self, name: str, arguments: Any, *, timeout_s: float | None = None) -> ToolOutcome:
        """Check and run one call."""
        return await self.run(self.check(name, arguments), timeout_s=timeout_s)


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
            raise ToolLoadError(f"cannot load tool module {module!r}: {type(exc).__name__}: {exc}") from exc
    return REGISTRY
