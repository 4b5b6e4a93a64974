"""What the loop asks of an engine and what it gets back, independent of llama.cpp.

The real engine (worker/engine/) and the scripted engine of the unit tests both take a
GenerationRequest and return a GenerationResult, so the loop runs the same over either.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, Protocol

# The tenant and weight of the job the current task runs (worker/jobrun.py sets it before the job's
# loop starts; its generation requests inherit it); outside a job, tenant "" of weight 1.
CALLER: ContextVar[tuple[str, float]] = ContextVar("toolq_caller", default=("", 1.0))

# (text, trusted): trusted text is template markup and may contain control tokens; untrusted
# text (user messages, tool results) is tokenized as plain text.
Segment = tuple[str, bool]

StopReason = Literal["stop", "length", "aborted", "context_length_exceeded"]


class EngineError(RuntimeError):
    """The engine could not generate (a decode failure, a grammar it refused)."""


class ContextLengthExceeded(EngineError):
    def __init__(self, prompt_tokens: int, n_ctx: int):
        super().__init__(f"the prompt is {prompt_tokens} tokens; the model's context holds {n_ctx}")
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


@dataclass
class GenerationRequest:
    segments: Sequence[Segment]
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = None
    stop: Sequence[str] = ()
    # A GBNF grammar. With grammar_trigger set, the grammar is lazy: it applies from the first
    # occurrence of the trigger text on, so free text before it is not slowed down.
    grammar: str | None = None
    grammar_trigger: str | None = None
    # Set from another thread to stop generation between two tokens (cancel, timeout).
    stop_event: threading.Event = field(default_factory=threading.Event)
    # Called from the generation thread with each piece of decoded text.
    on_text: Callable[[str], None] | None = None
    # Called from the generation thread with all the text so far after each token; True ends
    # the generation there with stop reason "stop" (the loop stops a turn that repeats a call).
    stop_check: Callable[[str], bool] | None = None
    # The tenant the generation serves and its weight (TOOLQ_TENANTS): the engine shares its batch
    # between tenants by them (worker/engine/fairness.py). By default the job's, set by its task.
    tenant: str = field(default_factory=lambda: CALLER.get()[0])
    weight: float = field(default_factory=lambda: CALLER.get()[1])


@dataclass
class GenerationResult:
    text: str
    stop_reason: StopReason
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the previous call's cache
    completion_tokens: int = 0
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    # cached_tokens split by where they came from: "slot" (its own slot), "slot_copy" (copied from
    # another slot), "host" and "disk" (saved state restored: worker/engine/tiers/)
    cached_by_source: dict[str, int] = field(default_factory=dict)
    # The id the i-th call of the text was streamed under, when the text was streamed
    # (worker/formats/streaming.py): the parsed calls take the same ids.
    call_id: Callable[[int], str] | None = None

    @property
    def decode_tps(self) -> float:
        return self.completion_tokens / (self.decode_ms / 1000) if self.decode_ms > 0 else 0.0


@dataclass
class CacheStats:
    """The saved-state tiers (worker/engine/tiers/): what they hold and how placement used them."""

    hits: dict[str, int] = field(default_factory=dict)  # source -> prompts served from it (slot, slot_copy, host, disk)
    misses: dict[str, int] = field(default_factory=dict)  # tier -> prompts a tier could not serve
    bytes: dict[str, int] = field(default_factory=dict)  # tier -> bytes held (host, disk)
    entries: dict[str, int] = field(default_factory=dict)  # tier -> states held
    refused_files: int = 0  # state files refused (corrupt, truncated, foreign) and deleted
    # ("save" | "restore", stage or tier, seconds), appended by the engine, drained by the metrics
    timings: deque[tuple[str, str, float]] = field(default_factory=lambda: deque(maxlen=4096))


@dataclass
class EngineStats:
    """An engine's slots and counters since start; the worker's metrics turn them into rates."""

    slots: int = 0
    busy: int = 0
    waiting: int = 0
    steps: int = 0
    batch_tokens: int = 0  # tokens decoded, prompt and generated
    batch_sequences: int = 0  # sequences in each step, summed (batch_sequences / steps = mean batch size)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    # generated tokens a grammar forced, evaluated in chunks like a prompt (so in prefill_tokens too)
    forced_tokens: int = 0
    # prompts placed in a slot: their tokens, and of those the ones the slot's cache already held
    prompt_tokens: int = 0
    cached_tokens: int = 0
    set_aside: int = 0  # sequences set aside for a tenant below its share (worker/engine/fairness.py)
    prefill_s: float = 0.0  # time in steps that carried prompt tokens
    decode_s: float = 0.0  # time in steps that carried only generated tokens
    cache: CacheStats = field(default_factory=CacheStats)


class Engine(Protocol):
    """What the loop needs of an engine."""

    name: str
    n_ctx: int

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    def stats(self) -> EngineStats: ...

    def close(self) -> None: ...


async def generate_in_thread(
    executor: Executor, generate_sync: Callable[[GenerationRequest], GenerationResult], request: GenerationRequest
) -> GenerationResult:
    """Run a blocking generation in the engine's own thread.

    Cancelling the awaiting task does not stop a thread, so on cancel the request's stop flag is
    set and the thread is awaited (it stops within a token): the thread is free again when the
    CancelledError propagates, and no generation is left running behind the caller's back.
    """
    fut = asyncio.get_running_loop().run_in_executor(executor, generate_sync, request)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        request.stop_event.set()
        await asyncio.wait([fut])
        raise
