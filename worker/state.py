"""What one worker process holds while it runs: the model, the conversation parts and its jobs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from store.arq_link import StalledPickups
from store.fair import FairQueue
from store.jobstore import JobStore
from store.leases import Leases
from toolq.tools import ToolRegistry
from toolq.wire.protocol import Usage
from worker.conversation import ConversationLoop
from worker.endings import StopCause
from worker.generation import Engine
from worker.held import HeldConversations
from worker.metrics import EngineWatch
from worker.settings import WorkerSettings


@dataclass
class RunningJob:
    job_id: str
    attempt: int
    stop_event: threading.Event
    task: asyncio.Task
    why_stopped: StopCause | None = None
    usage: Usage = field(default_factory=Usage)  # the loop's running total (worker/budget.py)
    token_cap: int | None = None  # the job's tokens across its rounds (worker/budget.py)
    since: float = field(default_factory=time.monotonic)  # when it started (worker/cancel.py)

    def interrupt(self, why: StopCause) -> None:
        """Stop the model thread (between tokens) and the loop task, saying why."""
        self.why_stopped = why
        self.stop_event.set()
        self.task.cancel()

    async def stop(self, why: StopCause) -> None:
        """Interrupt, then wait until the loop task has really stopped."""
        self.interrupt(why)
        await asyncio.gather(self.task, return_exceptions=True)


@dataclass
class WorkerState:
    settings: WorkerSettings
    engine: Engine
    loop: ConversationLoop
    store: JobStore
    leases: Leases
    registry: ToolRegistry
    model: str
    worker_id: str
    max_jobs: int
    running: dict[str, RunningJob] = field(default_factory=dict)
    active: int = 0  # attempts the queue handed over and not yet returned (worker/load.py)
    finishing: set[str] = field(default_factory=set)  # of those, the jobs writing their ending: counted free
    fair: FairQueue | None = None  # fair share on: the choice of the next jobs (store/fair.py)
    free_early: Callable[[str], None] | None = None  # the pickup counts a job free (worker/pickup.py)
    lines_seen_s: float = float("-inf")  # monotonic time its looks last saw a batch line (worker/load.py)
    load_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one load write at a time (worker/load.py)
    full_reported: bool | None = None  # what the load in Redis says: full, not full, or unknown (worker/load.py)
    jobs_done: int = 0
    beats: int = 0
    background: list[asyncio.Task] = field(default_factory=list)
    engine_watch: EngineWatch = field(default_factory=EngineWatch)
    pickups: StalledPickups | None = None  # set at startup, with the Redis client
    held: HeldConversations = field(default_factory=lambda: HeldConversations(1))  # sized at startup

    @property
    def registry_ttl_ms(self) -> int:
        """How long its registry entry and held set live without a heartbeat."""
        return max(3 * self.settings.heartbeat_ms, 3000)
