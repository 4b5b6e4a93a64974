"""One job's tools, wherever each runs: the ToolBox the loop calls, built by the ToolResolver.

A ToolSource holds tools that run away from the caller: the worker's registry
(``worker/sources/registry.py``), MCP servers (``worker/sources/mcp.py``) and tool services
(``worker/sources/services.py``). A client tool (a function definition in the request) has no
source: its calls pause the job until the caller posts the result. For each name the first source
that holds it wins, in the resolver's order, and a client definition in the request wins over all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from toolq.tools import CheckedCall, ToolOutcome, UnknownToolError
from toolq.tools.messages import unknown_tool
from toolq.tools.schema_tool import SchemaTool
from toolq.wire.protocol import JobRequest, Where
from worker import traces

__all__ = ["BoxTool", "ToolBox", "ToolResolver", "ToolSource"]


class ToolSource(Protocol):
    """Tools that run somewhere other than the caller."""

    where: Where

    def names(self) -> list[str]: ...

    def spec(self, name: str) -> dict[str, Any]:
        """The OpenAI function spec shown to the model."""
        ...

    def requires_approval(self, name: str) -> bool: ...

    def idempotent(self, name: str) -> bool:
        """Safe to run again under the same effect key: a call a lost attempt left with an unknown
        outcome is run again (worker/conversation/triage.py)."""
        ...

    def check(self, name: str, arguments: Any) -> CheckedCall: ...

    async def run(self, call: CheckedCall, *, call_id: str, effect_key: str, timeout_s: float) -> ToolOutcome:
        """Never raises but asyncio.CancelledError: a failure is an outcome the model reads.
        ``effect_key``: the call's key for its effects (toolq/tools/effects.py), handed on."""
        ...

    async def refresh(self) -> None:
        """Re-read a set of tools that can change while the worker runs (tool services)."""
        ...


@dataclass(frozen=True)
class BoxTool:
    name: str
    spec: dict[str, Any]
    where: Where
    requires_approval: bool
    source: ToolSource | None  # None: the client runs it
    schema_tool: SchemaTool | None = None  # a client tool's checker
    idempotent: bool = False  # run again when a lost attempt left its outcome unknown


class ToolBox:
    """The tools of one job, in the order the request named them."""

    def __init__(self, tools: Sequence[BoxTool]):
        self._tools = {t.name: t for t in tools}

    def names(self) -> set[str]:
        return set(self._tools)

    def specs(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        chosen = self._tools.values() if names is None else [self._tools[n] for n in names if n in self._tools]
        return [t.spec for t in chosen]

    def get(self, name: str) -> BoxTool | None:
        return self._tools.get(name)

    def where(self, name: str) -> Where:
        return self._tools[name].where

    def check(self, name: str, arguments: Any) -> CheckedCall:
        t = self._tools.get(name)
        if t is None:
            return CheckedCall(name, None, [unknown_tool(name, self._tools)], None)
        if t.source is None:
            assert t.schema_tool is not None
            return t.schema_tool.check(arguments)
        return t.source.check(name, arguments)

    async def run(self, call: CheckedCall, *, call_id: str, effect_key: str, timeout_s: float) -> ToolOutcome:
        if call.errors or call.kwargs is None:
            text = "\n".join(call.errors)
            return ToolOutcome(ok=False, content=text, error=text, duration_ms=0.0)
        t = self._tools[call.name]
        if t.source is None:
            raise RuntimeError(f"tool {call.name!r} runs on the client; the worker cannot run it")
        # current while the source runs it: a tool service or MCP server receives its context
        with traces.tool(call.name, call_id, t.where, effect_key):
            outcome = await t.source.run(call, call_id=call_id, effect_key=effect_key, timeout_s=timeout_s)
            traces.tool_ended(outcome)
        return outcome


class ToolResolver:
    """Builds each job's ToolBox from the sources this worker can reach."""

    def __init__(self, sources: Sequence[ToolSource]):
        self.sources = list(sources)

    def local_specs(self) -> list[dict[str, Any]]:
        """What this worker advertises in its fleet entry: its own tools and its MCP servers' tools,
        each marked with where it runs and whether it needs approval. Tool services advertise
        theirs themselves."""
        out, seen = [], set()
        for src in self.sources:
            if src.where == "service":
                continue
            for name in src.names():
                if name not in seen:
                    seen.add(name)
                    out.append({**src.spec(name), "where": src.where, "requires_approval": src.requires_approval(name)})
        return out

    def _find(self, name: str) -> ToolSource | None:
        for src in self.sources:
            if name in src.names():
                return src
        return None

    async def box(self, request: JobRequest) -> ToolBox:
        """The job's tools; a served name that no source holds raises UnknownToolError."""
        if request.tool_choice == "none":
            return ToolBox([])
        served = request.served_tool_names()
        if served is None:
            served = list(dict.fromkeys(n for s in self.sources for n in s.names()))
        missing = [n for n in served if self._find(n) is None]
        if missing:
            for src in self.sources:  # a tool service may have started since the last refresh
                await src.refresh()
            missing = [n for n in served if self._find(n) is None]
        if missing:
            raise UnknownToolError(missing, [n for s in self.sources for n in s.names()])
        approval = request.approval_required()
        out: list[BoxTool] = []
        client = {t.name: t for t in request.client_tools()}
        for ref in request.tools if request.tools is not None else served:
            name = ref if isinstance(ref, str) else ref.name
            if name in client:
                ct = client[name]
                st = SchemaTool(name, ct.function.description, ct.function.parameters or {}, ct.requires_approval)
                out.append(BoxTool(name, ct.spec(), "client", ct.requires_approval, None, st))
                continue
            found = self._find(name)
            assert found is not None
            needs = found.requires_approval(name) or name in approval
            out.append(BoxTool(name, found.spec(name), found.where, needs, found, idempotent=found.idempotent(name)))
        return ToolBox(out)
