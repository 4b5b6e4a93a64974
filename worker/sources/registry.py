"""The worker's own tools (``--tools`` modules, ``@tool`` functions) as a ToolSource."""

from __future__ import annotations

from typing import Any

from toolq.protocol import Where
from toolq.tools import CheckedCall, ToolOutcome, ToolRegistry


class RegistrySource:
    where: Where = "worker"

    def __init__(self, registry: ToolRegistry):
        self.registry = registry

    def names(self) -> list[str]:
        return self.registry.names()

    def spec(self, name: str) -> dict[str, Any]:
        return self.registry.get(name).spec()

    def requires_approval(self, name: str) -> bool:
        return self.registry.get(name).requires_approval

    def check(self, name: str, arguments: Any) -> CheckedCall:
        return self.registry.check(name, arguments)

    async def run(self, call: CheckedCall, *, call_id: str, timeout_s: float) -> ToolOutcome:
        return await self.registry.run(call, timeout_s=timeout_s)

    async def refresh(self) -> None:
        return None
