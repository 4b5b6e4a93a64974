"""Where the loop publishes what it does: the worker's ``EventLog`` (``worker/events.py``), or a
list in a unit test."""

from __future__ import annotations

from typing import Any, Protocol

from toolq.wire.protocol import ToolCall, Where
from worker.formats.streaming import TurnReader


class EventSink(Protocol):
    async def tool_call(
        self,
        call: ToolCall,
        iteration: int,
        *,
        checkpoint: dict[str, Any] | None = None,
        where: Where = "worker",
        awaiting: str | None = None,
        durable: bool = False,
        effect_key: str | None = None,
    ) -> Any: ...

    async def tool_result(
        self,
        call: ToolCall,
        *,
        ok: bool,
        content: str,
        error: str | None,
        duration_ms: float,
        executed: bool,
        checkpoint: dict[str, Any],
        where: Where = "worker",
        effect_key: str | None = None,
        outcome_unknown: bool = False,
        rerun: bool = False,
    ) -> Any: ...

    def push_text(self, text: str, reader: TurnReader | None = None) -> None: ...
