"""What a conversation holds between rounds, and how a loop ends: ``LoopState`` is also what the
checkpoint holds (``checkpoint`` / ``from_checkpoint``, its one codec), so a job resumed on
another worker goes on from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from toolq.wire.protocol import ActionKind, Message, PendingAction, Usage

# How the loop ended. ``requires_action``: it waits on its caller for ``LoopOutcome.pending``.
LoopEnd = Literal["stop", "length", "max_iterations", "requires_action"]


class Aborted(Exception):
    """The engine stopped because the job's stop flag was set (cancel, timeout, shutdown)."""


@dataclass
class LoopState:
    """Everything needed to continue a job: also what the checkpoint holds."""

    messages: list[Message]
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    generate_ms: float = 0.0
    tools_ms: float = 0.0
    # call id -> "client" | "approval": calls of the last turn that wait on the caller
    awaiting: dict[str, ActionKind] = field(default_factory=dict)
    # call id -> the caller's answer, given when a paused job resumes (not checkpointed: once
    # applied, an answer is a tool message in ``messages``). {"content": str} for a client
    # tool, {"approved": bool, "reason": str | None} for an approval.
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def checkpoint(self) -> dict[str, Any]:
        return {
            "messages": [m.model_dump(mode="json", exclude_none=True) for m in self.messages],
            "iterations": self.iterations,
            "usage": self.usage.model_dump(),
            "generate_ms": self.generate_ms,
            "tools_ms": self.tools_ms,
            "awaiting": dict(self.awaiting),
        }

    @classmethod
    def from_checkpoint(cls, data: dict[str, Any]) -> LoopState:
        awaiting: dict[str, ActionKind] = {
            str(k): "client" if v == "client" else "approval" for k, v in (data.get("awaiting") or {}).items()
        }
        return cls(
            messages=[Message.model_validate(m) for m in data["messages"]],
            iterations=int(data.get("iterations", 0)),
            usage=Usage.model_validate(data.get("usage", {})),
            generate_ms=float(data.get("generate_ms", 0.0)),
            tools_ms=float(data.get("tools_ms", 0.0)),
            awaiting=awaiting,
        )


def checkpoint_usage(data: dict[str, Any] | None) -> Usage | None:
    """The job's token figures so far, as a checkpoint holds them (None: no checkpoint)."""
    return None if data is None else Usage.model_validate(data.get("usage", {}))


@dataclass
class LoopOutcome:
    content: str
    finish_reason: LoopEnd
    state: LoopState
    pending: list[PendingAction] = field(default_factory=list)  # with requires_action
