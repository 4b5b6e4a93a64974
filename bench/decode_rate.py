"""Decode speed, measured the same way for the engine and for the tight loop it is compared with.

A speed is steady-state: tokens per second over the steps in which every sequence of the run is decoding (from
the step where the last one has finished its prompt to the step where the first one ends), so prompt
evaluation and the ramp up and down are left out on both sides.

- ``TightLoop``: llama.cpp's batched decoding driven the tightest way Python can, on its own model and a
  context shaped like the engine's (slots x per-slot context, unified KV cache, the same n_batch): one
  ``llama_decode`` a step over one token per sequence, then greedy sampling per sequence with llama.cpp's
  sampler, nothing else. With a grammar (one sequence), the grammar is applied to the whole vocabulary every
  token, as llama-cpp-python's high-level API does.
- ``engine_rate``: concurrent ``LlamaEngine.submit`` calls; an ``on_text`` callback notes the engine step in
  which each sequence produced text, and when the first text of each step arrived.

The tight loop runs in a process of its own (``TightLoopProcess``), and a benchmark keeps one engine alive at a
time. llama.cpp's CPU backend runs each decode on an OpenMP team of the calling thread and meets its threads at
an OpenMP barrier after every graph node; once a process holds more OpenMP threads than there are cores (a
second thread that has called ``llama_decode``: the engine's decode thread and a loop on the main thread),
libgomp stops spinning at those barriers and sleeps in the kernel instead, about a thousand times a token. On
2 cores that cuts both to about 40% (96 -> 35-40 tok/s, SmolLM2, 2 threads), for as long as both threads live.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from worker.engine import LlamaEngine
from worker.generation import GenerationRequest, Segment

_token_data = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)


@dataclass
class Measure:
    tps: float  # aggregate tokens/s over the steps in which every sequence was decoding
    steps: int  # how many such steps were timed
    counts: list[int]  # tokens each sequence generated


def _rate(n_seqs: int, steps: int, seconds: float, counts: list[int]) -> Measure:
    return Measure(n_seqs * steps / seconds if steps > 0 else 0.0, steps, counts)


class TightLoop:
    def __init__(self, model_path: Path, *, slots: int, n_ctx: int, n_batch: int, n_threads: int, gpu_layers: int = 0):
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = gpu_layers
        self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = slots * n_ctx
        cparams.n_seq_max = slots
        cparams.kv_unified = True
        cparams.n_batch = cparams.n_ubatch = n_batch
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.flash_attn_type = 0  # as the engine (flash_attn=False)
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.n_batch = n_batch
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._cand = np.zeros(self.n_vocab, dtype=_token_data)
        self._cand["id"] = np.arange(self.n_vocab, dtype=np.int32)

    def _put(self, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        b = self.batch
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
        b.seq_id[i][0] = seq_id

    def _sample_whole_vocabulary(self, chain: object, grammar: object, idx: int) -> int:
        logits = llama_cpp.llama_get_logits_ith(self.ctx, idx)
        self._cand["logit"] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        self._cand["p"] = 0.0
        arr = llama_cpp.llama_token_data_array(
            self._cand.ctypes.data_as(llama_cpp.llama_token_data_p), self.n_vocab, -1, False
        )
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(arr))
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        token = int(arr.data[arr.selected].id)
        llama_cpp.llama_sampler_accept(grammar, token)
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    def run(self, prompts: Sequence[list[int]], n_tokens: int, grammar: str | None = None) -> Measure:
        """Generate up to ``n_tokens`` a prompt (fewer when the model ends), one sequence per prompt."""
        llama_cpp.llama_memory_clear(self.mem, True)
        chains, last, pos = [], [], []
        gsmpl = llama_cpp.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root") if grammar else None
        for s, prompt in enumerate(prompts):  # prompt evaluation, untimed: one sequence at a time
            for start in range(0, len(prompt), self.n_batch):
                chunk = prompt[start : start + self.n_batch]
                for i, token in enumerate(chunk):
                    self._put(i, token, start + i, s, start + i == len(prompt) - 1)
                self.batch.n_tokens = len(chunk)
                llama_cpp.llama_decode(self.ctx, self.batch)
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            chains.append(chain)
            if gsmpl is not None:
                last.append(self._sample_whole_vocabulary(chain, gsmpl, len(chunk) - 1))
            else:
                last.append(llama_cpp.llama_sampler_sample(chain, self.ctx, len(chunk) - 1))
            pos.append(len(prompt))
        counts = [1] * len(prompts)
        active = [s for s in range(len(prompts)) if not llama_cpp.llama_vocab_is_eog(self.vocab, last[s])]
        marks: list[float] = []  # after each step's decode, while every sequence is still in the batch
        while active:
            for i, s in enumerate(active):
                self._put(i, last[s], pos[s], s, True)
            self.batch.n_tokens = len(active)
            llama_cpp.llama_decode(self.ctx, self.batch)
            if len(active) == len(prompts):
                marks.append(time.perf_counter())
            still = []
            for i, s in enumerate(active):
                if gsmpl is not None:
                    token = self._sample_whole_vocabulary(chains[s], gsmpl, i)
                else:
                    token = llama_cpp.llama_sampler_sample(chains[s], self.ctx, i)
                pos[s] += 1
                if llama_cpp.llama_vocab_is_eog(self.vocab, token):
                    continue
                last[s] = token
                counts[s] += 1
                if counts[s] < n_tokens:
                    still.append(s)
            active = still
        for chain in chains:
            llama_cpp.llama_sampler_free(chain)
        if gsmpl is not None:
            llama_cpp.llama_sampler_free(gsmpl)
        return _rate(len(prompts), len(marks) - 1, marks[-1] - marks[0] if marks else 0.0, counts)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


@llama_cpp.llama_log_callback
def _quiet(level: int, text: bytes, user_data: object) -> None:  # pragma: no cover - called from C
    pass


def _serve(conn, model_path: Path, shape: dict) -> None:
    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    loops: dict[int, TightLoop] = {}  # one a number of slots, all driven from this process's one thread
    while (job := conn.recv()) is not None:
        slots, prompts, n_tokens, grammar = job
        try:
            if slots not in loops:
                loops[slots] = TightLoop(model_path, slots=slots, **shape)
            conn.send((True, loops[slots].run(prompts, n_tokens, grammar)))
        except Exception as e:  # the parent raises it
            conn.send((False, repr(e)))
    for loop in loops.values():
        loop.close()


class TightLoopProcess:
    """TightLoops (one a number of slots) in a child process; ``run`` as TightLoop's, with ``slots`` defaulting
    to one a prompt."""

    def __init__(self, model_path: Path, *, n_ctx: int, n_batch: int, n_threads: int, gpu_layers: int = 0):
        shape = {"n_ctx": n_ctx, "n_batch": n_batch, "n_threads": n_threads, "gpu_layers": gpu_layers}
        mp = multiprocessing.get_context("spawn")
        self._conn, child = mp.Pipe()
        self._proc = mp.Process(target=_serve, args=(child, model_path, shape), name="tight-loop", daemon=True)
        self._proc.start()
        self.pid = self._proc.pid

    def run(
        self, prompts: Sequence[list[int]], n_tokens: int, grammar: str | None = None, *, slots: int | None = None
    ) -> Measure:
        self._conn.send((slots or len(prompts), [list(p) for p in prompts], n_tokens, grammar))
        ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"tight loop failed: {value}")
        return value

    def close(self) -> None:
        self._conn.send(None)
        self._proc.join()


def engine_rate(eng: LlamaEngine, prompts: Sequence[Sequence[Segment]], n_tokens: int, **request) -> Measure:
    """One request a prompt, all submitted at once; ``request`` adds GenerationRequest fields (a grammar)."""
    stats = eng.stats()
    first_seen: dict[int, float] = {}  # step -> when the first text of that step arrived
    steps_of: list[list[int]] = [[] for _ in prompts]

    def noting(i: int):
        def on_text(_text: str) -> None:
            step = stats.steps
            first_seen.setdefault(step, time.perf_counter())
            steps_of[i].append(step)

        return on_text

    futures = [
        eng.submit(GenerationRequest(segments=p, max_tokens=n_tokens, on_text=noting(i), **request))
        for i, p in enumerate(prompts)
    ]
    counts = [f.result().completion_tokens for f in futures]
    start = max(s[0] for s in steps_of)  # every sequence is decoding from here ...
    end = min(s[-1] for s in steps_of)  # ... to here
    return _rate(len(prompts), end - start, first_seen[end] - first_seen[start], counts)


def _busy_ticks() -> int:
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return user + nice + system + irq + softirq + steal


def _own_ticks(pids: Sequence[int]) -> int:
    """CPU ticks of these live processes and of every child this process has waited for (llama-bench)."""
    t = os.times()
    total = round((t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK"))
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


class OtherLoad:
    """CPU used by other processes while a benchmark runs, in cores: on 2 shared cores, another busy process
    slows llama.cpp's threads far more than its share (they wait for each other at every barrier), so a figure
    taken while this is above ~0.1 is not to be trusted."""

    def __init__(self, *pids: int):
        self.pids = [os.getpid(), *pids]
        self.t0, self.busy0, self.own0 = time.monotonic(), _busy_ticks(), _own_ticks(self.pids)

    def note(self) -> str:
        hz = os.sysconf("SC_CLK_TCK")
        other = (_busy_ticks() - self.busy0) - (_own_ticks(self.pids) - self.own0)
        one, five, _ = os.getloadavg()
        return (
            f"other processes used {max(other, 0) / hz / (time.monotonic() - self.t0):.2f} cores on average "
            f"during this run (load average {one:.2f}, {five:.2f})"
        )
