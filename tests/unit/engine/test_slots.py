"""Where a prompt goes: its own slot, else the least recently used one with the longest shared
prefix copied in (worker/engine/slots.py)."""

from __future__ import annotations

from worker.engine.slots import Slot, common_prefix, place

SYSTEM = list(range(100, 140))  # a shared system prompt and tool definitions


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2


def test_all_busy_means_wait():
    slots = [Slot(0, busy=True), Slot(1, busy=True)]
    assert place(slots, [1, 2, 3]) is None


def test_the_next_round_of_a_conversation_returns_to_its_own_slot():
    conv_a = SYSTEM + [1, 2, 3, 4]
    conv_b = SYSTEM + [7, 8, 9]
    slots = [Slot(0, list(conv_a), last_used=1), Slot(1, list(conv_b), last_used=2), Slot(2, last_used=0)]
    p = place(slots, conv_a + [5, 6])
    assert p is not None and p.slot.seq_id == 0 and p.keep == len(conv_a) and p.copy_from is None


def test_a_new_conversation_takes_the_least_recently_used_slot_and_copies_the_shared_prefix():
    conv_a = SYSTEM + [1, 2, 3, 4]
    slots = [Slot(0, list(conv_a), busy=True, last_used=5), Slot(1, [9, 9], last_used=3), Slot(2, [], last_used=1)]
    p = place(slots, SYSTEM + [50, 51])
    assert p is not None
    assert p.slot.seq_id == 2  # not slot 1: it holds another conversation's cache, used more recently
    assert p.copy_from is slots[0] and p.keep == len(SYSTEM)


def test_a_prefix_two_slots_share_is_not_anyones_own():
    conv_a = SYSTEM + [1]
    conv_b = SYSTEM + [2]
    slots = [Slot(0, list(conv_a), last_used=2), Slot(1, list(conv_b), last_used=1)]
    p = place(slots, SYSTEM + [3])
    assert p is not None and p.slot.seq_id == 1 and p.keep == len(SYSTEM) and p.copy_from is None


def test_the_last_prompt_token_is_always_evaluated():
    prompt = SYSTEM + [1, 2]
    slots = [Slot(0, list(prompt) + [3])]
    p = place(slots, prompt)
    assert p is not None and p.keep == len(prompt) - 1


def test_nothing_shared_keeps_nothing():
    slots = [Slot(0, [5, 6], last_used=2), Slot(1, [7], last_used=1)]
    p = place(slots, [1, 2, 3])
    assert p is not None and p.slot.seq_id == 1 and p.keep == 0 and p.copy_from is None


def test_a_tenant_below_its_share_keeps_its_prefix_while_another_free_slot_will_do():
    from worker.engine.fairness import TokenCounters

    counters = TokenCounters()
    counters.charge("a", 1.0, prompt=5000)  # a's flood has had far more service than b
    counters.charge("b", 1.0, prompt=100)
    slots = [Slot(0, [7, 7, 7], last_used=1, tenant="b"), Slot(1, [8, 8], last_used=2, tenant="a")]
    p = place(slots, [1, 2, 3], counters.spare("a"))
    assert p is not None and p.slot.seq_id == 1  # not b's, though it is the least recently used
    p = place(slots, [1, 2, 3], counters.spare("b"))
    assert p is not None and p.slot.seq_id == 0  # b itself goes by recency
    slots[1].busy = True
    p = place(slots, [1, 2, 3], counters.spare("a"))
    assert p is not None and p.slot.seq_id == 0  # the only free slot: work goes on
