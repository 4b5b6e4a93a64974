"""Tool services (``toolq.ToolService``, registered in Redis) as a ToolSource.

The live instances' tools are re-read every ``REFRESH_S`` in the background (``keep_fresh``) and whenever a
job names a tool no source holds (``refresh``, called by the resolver), so a service that starts
is usable at once and one that died stops being offered within a few seconds. Calls are checked
here against the schema the service registered, before they travel; the service checks them
again with its own registry.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from store.errors import RedisError
from toolq.services import ServiceCaller, ServiceFleetView
from toolq.tools import CheckedCall, ToolOutcome
from toolq.tools.messages import unknown_tool
from toolq.tools.schema_tool import SchemaTool
from toolq.wire.definitions import check_parameters, check_tool_name
from toolq.wire.protocol import Where

log = structlog.get_logger("toolq.worker")

REFRESH_S = 2.0


class ServiceSource:
    where: Where = "service"

    def __init__(self, redis: Any, *, max_age_s: float = REFRESH_S):
        self.services = ServiceFleetView(redis, max_age_s)
        self.caller = ServiceCaller(redis, self.services)
        self._tools: dict[str, SchemaTool] = {}
        self._idempotent: dict[str, bool] = {}  # as each tool's service declared it

    def names(self) -> list[str]:
        return list(self._tools)

    def spec(self, name: str) -> dict[str, Any]:
        return self._tools[name].spec()

    def requires_approval(self, name: str) -> bool:
        return self._tools[name].requires_approval

    def idempotent(self, name: str) -> bool:
        return self._idempotent.get(name, True)  # a service's calls are delivered at least once already

    def check(self, name: str, arguments: Any) -> CheckedCall:
        found = self._tools.get(name)
        if found is None:
            return CheckedCall(name, None, [unknown_tool(name, self._tools)], None)
        return found.check(arguments)

    async def run(self, call: CheckedCall, *, call_id: str, effect_key: str, timeout_s: float) -> ToolOutcome:
        if call.errors or call.kwargs is None:
            text = "\n".join(call.errors)
            return ToolOutcome(ok=False, content=text, error=text, duration_ms=0.0)
        found = self._tools.get(call.name)
        limit = (found.timeout_s if found is not None else None) or timeout_s  # the tool's own wins
        # the effect key is the service call's id, so its result is kept and found under it
        return await self.caller.call(call.name, effect_key, call.kwargs, limit)

    async def refresh(self) -> None:
        try:
            services = await self.services.get(fresh=True)
        except RedisError as e:
            log.warning("reading the live tool services failed", error=str(e))
            return
        tools: dict[str, SchemaTool] = {}
        for name, spec in services.tools().items():
            known = self._tools.get(name)
            if known is not None and known.spec()["function"] == spec["function"] and _same_terms(known, spec):
                tools[name] = known  # unchanged: keep its compiled validator
                continue
            made = _schema_tool(spec)
            if made is not None:
                tools[name] = made
        self._tools = tools
        specs = services.tools()
        self._idempotent = {n: specs[n].get("idempotent") is not False for n in tools}

    async def keep_fresh(self) -> None:
        """Refresh every ``REFRESH_S`` until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(REFRESH_S)


def _same_terms(known: SchemaTool, spec: dict[str, Any]) -> bool:
    return known.requires_approval == bool(spec.get("requires_approval")) and known.timeout_s == _timeout(spec)


def _timeout(spec: dict[str, Any]) -> float | None:
    t = spec.get("timeout_s")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 else None


def _schema_tool(spec: dict[str, Any]) -> SchemaTool | None:
    """A service's registered spec as a SchemaTool; None (logged) when it is not a usable tool:
    the fleet entries are written by other processes, so it is checked like a caller's definition."""
    fn = spec["function"]
    try:
        name = check_tool_name(fn.get("name"))
        parameters = check_parameters(name, fn.get("parameters", {"type": "object", "properties": {}}))
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise ValueError(f"tool {name!r}: description must be a string")
    except ValueError as e:
        log.warning("ignoring a tool service's tool", error=str(e))
        return None
    return SchemaTool(name, description, parameters, bool(spec.get("requires_approval")), _timeout(spec))
