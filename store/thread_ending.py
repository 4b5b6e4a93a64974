"""What a run's terminal event hands its thread (store/lua/lib/thread_end.lua, included by
emit.lua): the run's messages, so the script appends them in the same step as the event.

JobStore.emit calls ``ending_messages`` for every terminal event; a job that is no thread run
gets its messages dumped for nothing (cheaper than asking Redis first) and the script ignores them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from store import keys
from toolq.wire.protocol import EventType, JobResult, Message


def _complete_prefix(messages: list[Message]) -> list[Message]:
    """The longest prefix in which every assistant call has its tool result: a run stopped in the
    middle of a turn leaves no call without its answer in the thread."""
    open_calls: set[str] = set()
    good = 0
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            open_calls |= {c.id for c in m.tool_calls}
        elif m.role == "tool" and m.tool_call_id:
            open_calls.discard(m.tool_call_id)
        if not open_calls:
            good = i + 1
    return messages[:good]


def _dump(messages: Sequence[Message]) -> str:
    return json.dumps([m.model_dump_json(exclude_none=True) for m in messages], ensure_ascii=False)


async def ending_messages(redis: Any, job_id: str, type: EventType, result: JobResult | None) -> str:
    """What a job's terminal event hands thread_end.lua: the run's messages (a JSON array of
    Message JSON strings), or '' when nothing can be appended.

    A ``final`` carries the whole conversation. A failed or cancelled run carries only its
    request, so when its record asks for partial history the messages come from its checkpoint
    (written with every tool result; nothing else writes it once the attempt has stopped), cut
    back to the last point where every call has its result."""
    if result is None:
        return ""
    if type is EventType.final:
        return _dump(result.messages)
    thread, keep, checkpoint = await redis.hmget(keys.job(job_id), "thread", "thread_keep", "checkpoint")
    if not thread or keep != b"partial":
        return ""
    if not checkpoint:
        return _dump(result.messages)
    saved = [Message.model_validate(m) for m in json.loads(checkpoint).get("messages", [])]
    return _dump(_complete_prefix(saved))
