"""Calls to tool services, through Redis: one stream per tool (``keys.tool_calls``) read by the
services' consumer group (``keys.SERVICE_GROUP``), a result key per call, and a reply list the
caller blocks on. What a call and a result carry is toolq/services/calls.py's; who sends and who
runs them is toolq/services/ (``ServiceCaller``, ``ToolService``).

The caller's side (``CallSender``): lua/service_call.lua adds the call to the tool's stream, or
returns the result stored already under the call's id (a call sent again after a worker lost its
job is answered, not run twice). The service's side (``CallStreams``): read calls as one consumer
of the group, post a result (lua/service_result.lua: store it, wake the caller, acknowledge and
delete the entry, all at once), keep the calls in hand leased (lua/service_renew.lua), take the
calls that dead consumers left pending, and forget those consumers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from store import keys
from store.errors import ResponseError
from store.scripts import Script

if TYPE_CHECKING:  # a type only: the store does not load the tracing package
    from toolq.tracing.carrier import TraceCarrier

GROUP = keys.SERVICE_GROUP
Entry = tuple[str, bytes, dict[bytes, bytes] | None]  # (stream, entry id, fields)


def calls_stream(tool: str) -> str:
    """The name of the tool's call stream (what ``CallStreams`` hands back with each entry)."""
    return keys.tool_calls(tool)


class CallSender:
    def __init__(self, redis: Any):
        self.redis = redis
        self._send = Script(redis, "service_call")

    async def send(
        self,
        tool: str,
        call_id: str,
        arguments: str,
        timeout_ms: int,
        trace: TraceCarrier | None = None,
    ) -> bytes | None:
        """Send a call: its stored result when one exists under ``call_id`` already, else None.
        ``trace``: the caller's trace, which the service continues (None: a caller that does not trace)."""
        stored: bytes | None = await self._send(
            calls=keys.tool_calls(tool),
            result=keys.tool_result(tool, call_id),
            call_id=call_id,
            arguments=arguments,
            timeout_ms=timeout_ms,
            traceparent=trace.traceparent if trace else None,
            tracestate=trace.tracestate if trace else None,
        )
        return stored

    async def reply(self, tool: str, call_id: str, timeout_s: float) -> bytes | None:
        """Wait for the call's result, at most ``timeout_s``; None when none came."""
        got = await self.redis.blpop([keys.tool_reply(tool, call_id)], timeout=timeout_s)
        return None if got is None else bytes(got[1])


class CallStreams:
    """One service instance's side of the tools' call streams, as the consumer ``consumer``."""

    def __init__(self, redis: Any, consumer: str):
        self.redis = redis
        self.consumer = consumer
        self._post = Script(redis, "service_result")
        self._renew = Script(redis, "service_renew")

    async def create_groups(self, streams: list[str]) -> None:
        for stream in streams:
            try:
                # From the start of the stream: calls sent before any instance existed are served
                # (answered calls are deleted, and ones past their deadline are dropped unrun).
                await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise

    async def read(self, streams: list[str], count: int, block_ms: int) -> list[Entry]:
        """New calls, at most ``count``, waiting up to ``block_ms``; a stream deleted under us has
        its group made again and gives nothing this time."""
        try:
            got = await self.redis.xreadgroup(
                GROUP, self.consumer, dict.fromkeys(streams, ">"), count=count, block=block_ms
            )
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            await self.create_groups(streams)
            return []
        return [(stream.decode(), entry_id, fields) for stream, entries in got or [] for entry_id, fields in entries]

    async def post(self, stream: str, tool: str, entry_id: str, call_id: str, payload: str, ttl_ms: int) -> bytes:
        """Store a call's result and wake its caller; ``b"accepted"`` unless another got there first."""
        status: bytes = await self._post(
            calls=stream,
            result=keys.tool_result(tool, call_id),
            reply=keys.tool_reply(tool, call_id),
            group=GROUP,
            consumer=self.consumer,
            entry_id=entry_id,
            call_id=call_id,
            payload=payload,
            ttl_ms=ttl_ms,
        )
        return status

    async def drop(self, stream: str, entry_id: str) -> None:
        """Acknowledge and delete a call that will not be run (malformed, or past its deadline)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(stream, GROUP, entry_id)
            pipe.xdel(stream, entry_id)
            await pipe.execute()

    async def renew(self, stream: str, entry_id: str) -> None:
        """Keep a call in hand leased to this consumer."""
        await self._renew(calls=stream, group=GROUP, consumer=self.consumer, entry_id=entry_id)

    async def claim(self, stream: str, lease_ms: int, count: int) -> list[Entry]:
        """Take the calls that consumers which died left pending for longer than ``lease_ms``."""
        _, entries, *_ = await self.redis.xautoclaim(stream, GROUP, self.consumer, lease_ms, "0-0", count=count)
        return [(stream, entry_id, fields) for entry_id, fields in entries if entry_id is not None]

    async def forget_idle_consumers(self, stream: str, idle_ms: int) -> None:
        """Delete the group's other consumers that hold nothing and have not read for ``idle_ms``."""
        for c in await self.redis.xinfo_consumers(stream, GROUP):
            name = c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
            if name != self.consumer and c["pending"] == 0 and c["idle"] > idle_ms:
                await self.redis.xgroup_delconsumer(stream, GROUP, name)

    async def leave(self, streams: list[str]) -> None:
        """Leave the groups, except where this consumer still holds calls: another instance claims
        them (deleting the consumer would drop them)."""
        for stream in streams:
            if not await self.redis.xpending_range(stream, GROUP, "-", "+", 1, consumername=self.consumer):
                await self.redis.xgroup_delconsumer(stream, GROUP, self.consumer)

    async def server_time_ms(self) -> int:
        """Redis's clock, which every instance and caller shares (call deadlines are on it)."""
        sec, usec = await self.redis.time()
        return int(sec) * 1000 + int(usec) // 1000
