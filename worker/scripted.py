"""A scripted engine: replies chosen by rules over the prompt, emitted piece by piece.

For unit tests of the orchestration and for benchmarks of everything around the model (queue
pickup, gateway overhead). It honours the same contract as LlamaEngine: generation runs in one
thread, the stop flag is read between "tokens", max_tokens cuts the output, stop strings end it.
Never used to claim anything about the model itself.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.generation import (
    ContextLengthExceeded,
    EngineStats,
    GenerationRequest,
    GenerationResult,
    StopReason,
    generate_in_thread,
)

Reply = str | Callable[[str], str]


@dataclass
class Rule:
    when: str  # a regular expression searched in the prompt text
    reply: str


class ScriptedEngine:
    def __init__(
        self,
        replies: Sequence[Reply] | Sequence[Rule] = (),
        *,
        token_delay_s: float = 0.0,
        name: str = "scripted",
        n_ctx: int = 1 << 20,
        chars_per_token: int = 4,
        slots: int = 1,
    ):
        self.name = name
        self.n_ctx = n_ctx
        self.token_delay_s = token_delay_s
        self.chars_per_token = chars_per_token
        # Rules are never used up; replies are taken in order, the last one repeating.
        self._rules = [r for r in replies if isinstance(r, Rule)]
        self._replies = [r for r in replies if not isinstance(r, Rule)]
        self.prompts: list[str] = []  # every prompt seen, for assertions
        self.bos_token = ""
        self.eos_token = ""
        self.metadata: dict[str, str] = {}
        # One thread per slot: like LlamaEngine, up to ``slots`` generations run at once.
        self._executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="scripted")
        self._stats = EngineStats(slots=slots)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> ScriptedEngine:
        """Rules from JSON: ``{"rules": [{"when": REGEX, "reply": TEXT}], "token_delay_s": 0}``."""
        data = json.loads(Path(path).read_text())
        rules = [Rule(r["when"], r["reply"]) for r in data["rules"]]
        return cls(rules, token_delay_s=float(data.get("token_delay_s", 0.0)), **kw)

    def stats(self) -> EngineStats:
        return self._stats

    def _pick(self, prompt: str) -> str:
        with self._lock:
            return self._pick_locked(prompt)

    def _pick_locked(self, prompt: str) -> str:
        if self._rules:
            for rule in self._rules:
                if re.search(rule.when, prompt):
                    return rule.reply
            raise RuntimeError("no scripted rule matches the prompt")
        if not self._replies:
            raise RuntimeError("the scripted engine has no reply left")
        reply = self._replies.pop(0) if len(self._replies) > 1 else self._replies[0]
        return reply(prompt) if callable(reply) else reply

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await generate_in_thread(self._executor, self.generate_sync, request)

    def generate_sync(self, req: GenerationRequest) -> GenerationResult:
        prompt = "".join(text for text, _ in req.segments)
        self.prompts.append(prompt)
        n_prompt = max(1, len(prompt) // self.chars_per_token)
        if n_prompt >= self.n_ctx:
            raise ContextLengthExceeded(n_prompt, self.n_ctx)
        reply = self._pick(prompt)
        with self._lock:
            self._stats.busy += 1
        try:
            return self._emit(req, reply, n_prompt)
        finally:
            with self._lock:
                self._stats.busy -= 1

    def _emit(self, req: GenerationRequest, reply: str, n_prompt: int) -> GenerationResult:
        t0 = time.perf_counter()
        pieces = [reply[i : i + self.chars_per_token] for i in range(0, len(reply), self.chars_per_token)]
        out: list[str] = []
        reason: StopReason = "stop"
        for n, piece in enumerate(pieces):
            if req.stop_event.is_set():
                reason = "aborted"
                break
            if n >= req.max_tokens:
                reason = "length"
                break
            if self.token_delay_s:
                time.sleep(self.token_delay_s)
            out.append(piece)
            if req.stop_check is not None and req.stop_check("".join(out)):
                break
            if req.on_text:
                req.on_text(piece)
        text = "".join(out)
        for s in req.stop:
            if s and s in text:
                text, reason = text[: text.index(s)], "stop"
        return GenerationResult(text, reason, n_prompt, 0, len(out), 0.0, (time.perf_counter() - t0) * 1000)

    def close(self) -> None:
        self._executor.shutdown(wait=False)
