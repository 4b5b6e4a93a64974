"""One pub/sub connection per process fans the events of followed jobs out to their followers.

A follower (``EventHub.follow``) replays the job's stream from its start point, then takes the
events the hub hands it on a bounded queue of its own; it holds no Redis connection while it
waits. The hub's one task reads the per-job channels (``toolq:events:<id>``: emit.lua publishes
every event there) on one connection, subscribing a channel when the job's first follower comes
and dropping it when its last one leaves, and parses each event once for all its followers.

The seqs keep every follower exact (1, 2, 3 … without gaps or repeats, up to the one terminal
event): a follower yields only the seq after its last, drops what it has had, and reads the stream
again (XRANGE on the shared pool, at most ``reads`` at a time, a page at a time) whenever it sees
a gap, when its queue overflowed (the hub never waits on a slow follower; it empties that
follower's queue and leaves it a note to catch up), after the hub's connection came back, and on
each idle tick: pub/sub delivers at most once, and the stream is the record. A page that does not
start right after the follower's last seq means the log was trimmed past it: ``EventsGone``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

import structlog
from pydantic import ValidationError
from redis.exceptions import RedisError

from store import keys
from store.jobstore import JobStore
from toolq.errors import EventsGone
from toolq.wire.protocol import Event

log = structlog.get_logger("toolq.store")

SUBSCRIBE_WAIT_S = 2.0  # a follower waits this long for its channel's confirmation, then replays anyway
READ_TIMEOUT_S = 5.0  # each return of the reader runs the connection's health check (a PING)


class _Follower:
    """One follower's queue. ``None`` on it means: events were dropped, read the stream again."""

    def __init__(self, size: int):
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(size)

    def offer(self, item: Event | None) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            # too slow to keep up: what it missed is in the stream, and reading it there costs the
            # hub nothing
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


class _Channel:
    def __init__(self) -> None:
        self.followers: set[_Follower] = set()
        self.ready = asyncio.Event()  # set once Redis confirmed the subscription


class EventHub:
    def __init__(self, store: JobStore, *, queue_size: int = 256, reads: int = 4, page: int = 100):
        self.store = store
        self.queue_size = queue_size
        self.page = page
        self._reads = asyncio.Semaphore(reads)
        self._channels: dict[str, _Channel] = {}
        self._pubsub: Any = None  # set while connected
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # unsubscribes in flight
        self.connected = asyncio.Event()

    # ------------------------------------------------------------------ the reader

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="toolq-event-hub")

    async def stop(self) -> None:
        for t in (self._task, *self._tasks):
            if t is not None:
                t.cancel()
        await asyncio.gather(*(t for t in (self._task, *self._tasks) if t is not None), return_exceptions=True)

    async def _run(self) -> None:
        delay = 0.1
        while True:
            pubsub = self.store.redis.pubsub()
            try:
                await pubsub.connect()
                # redis-py resubscribes by itself when it reconnects inside a read; what was
                # published meanwhile is lost to pub/sub, so every follower reads the stream again
                pubsub.connection.register_connect_callback(self._reconnected)
                self._pubsub = pubsub  # before subscribing: a follower that joins meanwhile subscribes itself
                await pubsub.subscribe(keys.HUB_IDLE, *self._channels)
                self.connected.set()
                self._catch_up_all()
                delay = 0.1
                while True:
                    msg = await pubsub.get_message(timeout=READ_TIMEOUT_S)
                    if msg:
                        self._dispatch(msg)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as e:
                log.warning("event hub lost Redis; resubscribing", error=str(e), in_s=delay)
            except Exception:  # a bug here must not end every follower's stream for good
                log.exception("event hub error")
            finally:
                self._pubsub = None
                self.connected.clear()
                if pubsub.connection is not None:  # it goes back to the pool: not ours to watch any more
                    pubsub.connection.deregister_connect_callback(self._reconnected)
                with suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _reconnected(self, _connection: Any) -> None:
        self._catch_up_all()

    def _catch_up_all(self) -> None:
        for channel in self._channels.values():
            for f in channel.followers:
                f.offer(None)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        name = msg.get("channel")
        channel = self._channels.get(name.decode() if isinstance(name, bytes) else str(name))
        if channel is None:
            return
        if msg["type"] == "subscribe":
            channel.ready.set()
        elif msg["type"] == "message":
            try:
                ev = Event.model_validate_json(msg["data"])
            except ValidationError:
                return
            for f in channel.followers:
                f.offer(ev)

    # ------------------------------------------------------------------ followers

    @property
    def following(self) -> int:
        """Followers on this hub now."""
        return sum(len(c.followers) for c in self._channels.values())

    async def _join(self, job_id: str, f: _Follower) -> None:
        name = keys.events_channel(job_id)
        channel = self._channels.get(name)
        if channel is None:
            channel = self._channels[name] = _Channel()
            if self._pubsub is not None:
                with suppress(RedisError, OSError):  # else the reader resubscribes when it reconnects
                    await self._pubsub.subscribe(name)
        channel.followers.add(f)
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(channel.ready.wait(), SUBSCRIBE_WAIT_S)

    def _leave(self, job_id: str, f: _Follower) -> None:
        name = keys.events_channel(job_id)
        channel = self._channels.get(name)
        if channel is None:
            return
        channel.followers.discard(f)
        if channel.followers:
            return
        del self._channels[name]

        async def unsubscribe() -> None:
            # not if a follower came back for the job meanwhile: it subscribed again already
            if name not in self._channels and self._pubsub is not None:
                with suppress(RedisError, OSError):
                    await self._pubsub.unsubscribe(name)

        # a task of its own: this runs in a generator being closed, where awaiting is not reliable
        task = asyncio.ensure_future(unsubscribe())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def first_seq(self, job_id: str) -> int | None:
        """The seq of the first event the job's log still holds; None when it holds none."""
        async with self._reads:
            raw = await self.store.redis.xrange(keys.log(job_id), min="-", max="+", count=1)
        return int(raw[0][0].split(b"-")[0]) if raw else None

    async def _since(self, job_id: str, last: int) -> list[Event]:
        """A page of the job's events after ``last``, read from its stream."""
        async with self._reads:
            events = await self.store.events(job_id, last, count=self.page)
        if events and events[0].seq > last + 1:
            raise EventsGone(
                f"events {last + 1}..{events[0].seq - 1} of job {job_id!r} were trimmed from its log "
                f"(it keeps about the last {self.store.stream_maxlen}); follow from after={events[0].seq - 1}",
                field="Last-Event-ID",
            )
        return events

    async def follow(
        self, job_id: str, after: int = 0, *, idle_s: float = 15.0, ticks: bool = False
    ) -> AsyncIterator[Event | None]:
        """Replay events after ``after``, then follow live until the terminal event, as
        ``JobStore.follow`` does, without holding a connection. With ticks=True, yields None after
        each idle ``idle_s``. JobNotFound once the job is gone; EventsGone past a trim."""
        me = _Follower(self.queue_size)
        await self._join(job_id, me)
        try:
            last = after
            read = True  # the replay first; then whenever the queue cannot be trusted
            first = True
            while True:
                if read:
                    events = await self._since(job_id, last)
                    read = len(events) == self.page  # a full page: there may be more
                    if first and not events and await self.store.redis.hget(keys.job(job_id), "terminal") == b"1":
                        return  # asked for events after the terminal one: there will be none
                    first = False
                    for ev in events:
                        yield ev
                        last = ev.seq
                        if ev.terminal:
                            return
                    continue
                try:
                    item = await asyncio.wait_for(me.queue.get(), idle_s)
                except asyncio.TimeoutError:
                    # quiet: look at the stream anyway (a lost message; the job gone: JobNotFound)
                    events = await self._since(job_id, last)
                    read = len(events) == self.page
                    if not events and ticks:
                        yield None
                    for ev in events:
                        yield ev
                        last = ev.seq
                        if ev.terminal:
                            return
                    continue
                if item is None or item.seq > last + 1:
                    read = True
                elif item.seq == last + 1:
                    yield item
                    last = item.seq
                    if item.terminal:
                        return
        finally:
            self._leave(job_id, me)
