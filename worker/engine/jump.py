"""Jump forward: the text a grammar forces next is written without sampling it.

Under a grammar, the text it forces next (worker/grammar/forced.py) is not sampled a token a
step: its tokens join the sampled one as a chunk, like a prompt's, evaluated in one step, and the
sequence samples again after them. The last token of the forced text is left to the model, which
may join it with what follows. Each token is checked against llama.cpp's grammar first.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.engine.sampling import TokenSampler
from worker.engine.sequence import Generation
from worker.generation import StopReason
from worker.grammar.check import GrammarError
from worker.grammar.forced import Forced


def follower(gbnf: str) -> Forced | None:
    """A follower of the grammar, or None where it cannot be read (then every token is sampled)."""
    try:
        return Forced(gbnf)
    except (GrammarError, RecursionError):
        return None


def jump(
    seq: Generation,
    sampler: TokenSampler,
    tokenize: Callable[[str], list[int]],
    piece: Callable[[int], bytes],
) -> tuple[StopReason | None, int]:
    """Take the forced text after the token just sampled: the stop reason (or None) and how many
    forced tokens now wait in ``seq.pending`` with the sampled one."""
    text = seq.forced_text()
    if len(text) < 2:
        return None, 0
    forced = tokenize(text)[:-1]
    sampled = seq.next_token
    fed: list[int] = []
    for token in forced:
        if not sampler.allows(seq.grammar, token):
            break
        TokenSampler.take(seq.chain, seq.grammar, token)
        reason = seq.accept(token, is_eog=False, piece=piece)
        if reason is not None:
            return reason, 0
        fed.append(token)
    if fed and sampled is not None:
        seq.next_token = None
        seq.pending = [sampled, *fed]
        return None, len(fed)
    return None, 0
