"""The worker's own tools (``--tools`` modules, ``@tool`` functions) as a ToolSource."""

from __future__ import annotations

from typing import Any

from store.journal import Journal
from toolq.tools import CallContext, CheckedCall, ToolOutcome, ToolRegistry
from toolq.wire.protocol import Where


class RegistrySource:
    where: Where = "worker"

    def __init__(self, registry: ToolRegistry, journal: Journal | None = None):
        self.registry = registry
        self.journal = journal  # what ``current_call().once`` records in; None: no Redis at hand

    def names(self) -> list[str]:
        return self.registry.names()

    def spec(self, name: str) -> dict[str, Any]:
        return self.registry.get(name).spec()

    def requires_approval(self, name: str) -> bool:
        return self.registry.get(name).requires_approval

    def idempotent(self, name: str) -> bool:
        return bool(self.registry.get(name).idempotent)  # not declared: not run again

    def check(self, name: str, arguments: Any) -> CheckedCall:
        return self.registry.check(name, arguments)

    async def run(self, call: CheckedCall, *, call_id: str, effect_key: str, timeout_s: float) -> ToolOutcome:
        context = CallContext(key=effect_key, tool=call.name, journal=self.journal)
        return await self.registry.run(call, timeout_s=timeout_s, context=context)

    async def refresh(self) -> None:
        return None
