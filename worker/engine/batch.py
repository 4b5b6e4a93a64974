"""One step's batch: the tokens each sequence feeds the model, and the positions whose logits are
sampled after the decode."""

from __future__ import annotations

from typing import Any

import llama_cpp

from worker.engine.sequence import Generation


class StepBatch:
    def __init__(self, n_batch: int):
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.begin()

    def begin(self) -> None:
        self.n = 0
        self.outputs: list[tuple[Generation, int]] = []  # (sequence, index of the logits it samples from)
        self.fed: list[tuple[Generation, list[int]]] = []

    def feed(self, seq: Generation, tokens: list[int], *, sample: bool) -> None:
        """Put ``tokens`` after what the sequence's slot holds; ``sample``: its next token is
        sampled from the logits of the last."""
        assert seq.slot is not None
        b, base, seq_id = self._batch, len(seq.slot.tokens), seq.slot.seq_id
        for i, token in enumerate(tokens):
            j = self.n + i
            b.token[j] = token
            b.pos[j] = base + i
            b.n_seq_id[j] = 1
            b.seq_id[j][0] = seq_id
            b.logits[j] = sample and i == len(tokens) - 1
        self.n += len(tokens)
        if sample:
            self.outputs.append((seq, self.n - 1))
        self.fed.append((seq, tokens))

    def decode(self, ctx: Any) -> int:
        self._batch.n_tokens = self.n
        return int(llama_cpp.llama_decode(ctx, self._batch))

    def free(self) -> None:
        llama_cpp.llama_batch_free(self._batch)
