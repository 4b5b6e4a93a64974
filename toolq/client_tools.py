"""The caller's own Python functions as client-executed tools (``Client.run``): their definitions
for the request, and the answers to a paused job that waits on them.

The functions go into a private ToolRegistry, so a function becomes a tool exactly as a worker's
``@tool`` does (schema from its signature and docstring, strict validation, sync functions in
threads, a timeout) and its result is the same text a worker tool's would be.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolq.wire.api import ApprovalDecision, ToolResult
from toolq.wire.limits import MAX_TOOL_RESULT_BYTES
from toolq.wire.protocol import FunctionTool, PendingAction

if TYPE_CHECKING:
    from toolq.tools import ToolRegistry

__all__ = ["Approver", "ClientTools"]

Decision = bool | tuple[bool, str | None]
# Decides one call that needs approval: True / False, or (approved, reason); may be async.
Approver = Callable[[PendingAction], Decision | Awaitable[Decision]]


class ClientTools:
    def __init__(
        self,
        functions: Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]] = (),
        *,
        approve: Approver | None = None,
        timeout_s: float = 300.0,
    ):
        # the tool package (docstring-parser, jsonschema: the `tools` extra) only when there are
        # functions: a job with approvals alone runs on the light client
        self.registry: ToolRegistry | None = None
        if functions:
            from toolq.tools import ToolRegistry

            self.registry = ToolRegistry(default_timeout_s=timeout_s)
            named = functions.items() if isinstance(functions, Mapping) else ((None, fn) for fn in functions)
            for name, fn in named:
                self.registry.register(fn, name=name)
        self.approve = approve

    def definitions(self) -> list[FunctionTool]:
        """The functions as request tools that the caller runs."""
        specs = self.registry.specs() if self.registry is not None else []
        return [FunctionTool.model_validate({**spec, "execution": "client"}) for spec in specs]

    async def result(self, call: PendingAction) -> ToolResult:
        """Run the function a call names; its failure (or no such function) is an error result."""
        if self.registry is None or call.name not in self.registry:
            text = f"this client has no function for tool {call.name!r}"
            return ToolResult(tool_call_id=call.id, content=text, is_error=True)
        outcome = await self.registry.execute(call.name, call.arguments)
        content = outcome.content if outcome.ok else (outcome.error or "the tool failed")
        size = len(content.encode("utf-8", "replace"))
        if size > MAX_TOOL_RESULT_BYTES:
            text = f"the result of {call.name} was {size} bytes, above the limit of {MAX_TOOL_RESULT_BYTES}"
            return ToolResult(tool_call_id=call.id, content=text, is_error=True)
        return ToolResult(tool_call_id=call.id, content=content, is_error=not outcome.ok)

    async def decision(self, call: PendingAction) -> ApprovalDecision:
        """Ask ``approve``; without one every call is denied."""
        if self.approve is None:
            return ApprovalDecision(tool_call_id=call.id, approved=False, reason="this client approves no calls")
        got = self.approve(call)
        if inspect.isawaitable(got):
            got = await got
        approved, reason = got if isinstance(got, tuple) else (got, None)
        return ApprovalDecision(tool_call_id=call.id, approved=bool(approved), reason=reason)
