"""A slot's cache reused where it holds the prompt's text in other tokens (worker/engine/respell.py).

A toy vocabulary stands in for the tokenizer: the grammar's spelling of a reply is finer than
the tokenizer's spelling of the same text."""

from __future__ import annotations

from worker.engine.respell import aligned, respell
from worker.engine.slots import Slot, place

VOCAB = {
    1: b"<s>",  # plain text pieces
    2: b"{",
    3: b'"',
    4: b"name",
    5: b'{"',
    6: b'":',
    7: b" 1",
    8: b"}",
    9: b"\n",
    10: b"ok",
    11: b"}\n",
    12: b'name":',
}
END = 99  # a special token: spells only itself


def spell(t: int) -> bytes:
    return b"\x00" + bytes([t]) + b"\x00" if t == END else VOCAB[t]


SYSTEM = [1, 10, 10, 9]
REPLY_SAMPLED = [2, 3, 4, 6, 7, 8]  # {  "  name  ":   1  }   as the grammar sampled it
REPLY_TOKENIZED = [5, 4, 6, 7, 8]  # {"  name  ":  1  }    as the template's text tokenizes


def test_aligned_walks_to_the_last_shared_token_boundary():
    cached = SYSTEM + REPLY_SAMPLED + [END]
    prompt = SYSTEM + REPLY_TOKENIZED + [END, 10, 10]
    assert aligned(cached, prompt, len(SYSTEM), spell) == (len(cached), len(SYSTEM) + len(REPLY_TOKENIZED) + 1)


def test_aligned_stops_where_the_text_differs():
    cached = SYSTEM + [5, 4, 6, 7, 8]  # {"name": 1}
    prompt = SYSTEM + [5, 12, 10]  # {"name":ok
    assert aligned(cached, prompt, len(SYSTEM), spell) == (len(SYSTEM) + 3, len(SYSTEM) + 2)


def test_aligned_ends_at_boundaries_both_spellings_share():
    cached = SYSTEM + [8, 9]  # "}" "\n"
    prompt = SYSTEM + [11, 10]  # "}\n" "ok"
    assert aligned(cached, prompt, len(SYSTEM), spell) == (len(SYSTEM) + 2, len(SYSTEM) + 1)


def test_a_special_token_never_matches_its_text():
    cached = SYSTEM + [END]
    prompt = SYSTEM + [10]
    assert aligned(cached, prompt, len(SYSTEM), spell) == (len(SYSTEM), len(SYSTEM))


def test_the_next_round_reuses_the_reply_as_the_model_wrote_it():
    cached = SYSTEM + REPLY_SAMPLED + [END]
    slots = [Slot(0, list(cached), last_used=1), Slot(1, [], last_used=0)]
    prompt = SYSTEM + REPLY_TOKENIZED + [END, 10, 10]
    new = respell(slots, prompt, spell, room=100)
    assert new == cached + [10, 10]
    assert b"".join(spell(t) for t in new) == b"".join(spell(t) for t in prompt)
    p = place(slots, new)
    assert p is not None and p.slot.seq_id == 0 and p.keep == len(cached)


def test_no_rewrite_when_a_plain_prefix_is_as_long():
    cached = SYSTEM + REPLY_SAMPLED + [END]
    prompt = SYSTEM + REPLY_TOKENIZED + [END, 10]
    plain = Slot(1, SYSTEM + REPLY_TOKENIZED + [END, 10, 9])
    assert respell([Slot(0, list(cached)), plain], prompt, spell, room=100) is prompt


def test_a_rewrite_that_would_not_fit_the_context_is_not_made():
    cached = SYSTEM + REPLY_SAMPLED + [END]
    prompt = SYSTEM + REPLY_TOKENIZED + [END, 10]
    assert respell([Slot(0, list(cached))], prompt, spell, room=0) is prompt  # one token longer
    assert respell([Slot(0, list(cached))], prompt, spell, room=1) == cached + [10]
