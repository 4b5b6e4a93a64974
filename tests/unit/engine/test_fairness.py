"""Virtual token counters (worker/engine/fairness.py): the bound between two backlogged tenants,
the lift on return, weights, work conservation, and who gives a slot up.

Each simulated step is what the scheduler does with the counters (worker/engine/scheduler.py
``_step``): a tenant with room feeds one generated token per decoding sequence (2 units of room
each) and a prompt chunk of at most its room, and is charged for what it fed.
"""

from __future__ import annotations

from worker.engine.fairness import GENERATED_COST, PROMPT_COST, QUANTUM, TokenCounters, gives_way


def step(
    c: TokenCounters, demand: dict[str, tuple[int, int]], weights: dict[str, float], chunk: int = 32
) -> dict[str, int]:
    """One step; ``demand``: tenant -> (decoding sequences, prompt tokens left). Returns the
    tokens each tenant fed, and takes its prompt tokens off ``demand``."""
    feeding = {t: weights[t] for t, (dec, left) in demand.items() if dec or left}
    rooms = c.rooms(feeding)
    fed: dict[str, int] = {}
    for t in feeding:
        dec, left = demand[t]
        room = rooms[t]
        if room <= 0:
            continue
        gen = dec
        room -= gen * GENERATED_COST / PROMPT_COST
        take = 0
        if left and room > 0:
            take = min(left, chunk, max(int(room), 1)) if room != float("inf") else min(left, chunk)
        demand[t] = (dec, left - take)
        c.charge(t, weights[t], prompt=take, generated=gen)
        fed[t] = gen + take
    return fed


def test_two_backlogged_tenants_stay_within_a_tight_bound():
    c = TokenCounters()
    weights = {"a": 1.0, "b": 1.0}
    for t in weights:
        c.arrive(t)
    demand = {"a": (3, 0), "b": (1, 0)}
    worst = 0.0
    for i in range(5000):
        if i % 200 == 0:  # a's long prompts keep coming
            demand["a"] = (3, demand["a"][1] + 1500)
        step(c, demand, weights)
        worst = max(worst, abs(c.counters["a"] - c.counters["b"]))
    # the quantum plus what one step can charge a tenant (3 generated tokens and a chunk of its room)
    assert worst <= QUANTUM + 3 * GENERATED_COST + QUANTUM
    assert c.counters["b"] > 5000  # b decoded in most steps


def test_a_tenant_over_the_quantum_sits_the_step_out_and_the_lowest_never_does():
    c = TokenCounters()
    c.charge("a", 1.0, generated=100)  # 200 units ahead
    rooms = c.rooms({"a": 1.0, "b": 1.0})
    assert rooms["a"] <= 0 and rooms["b"] == float("inf")  # the lowest takes what the step allows
    c.charge("b", 1.0, generated=96)  # a now 8 ahead of b: 8 prompt tokens, twice that at weight 2
    assert c.rooms({"a": 1.0, "b": 1.0})["a"] == QUANTUM - 8
    assert c.rooms({"a": 2.0, "b": 1.0})["a"] == 2 * (QUANTUM - 8)


def test_a_tenant_returning_from_idle_is_lifted_to_the_lowest_backlogged():
    c = TokenCounters()
    c.arrive("a")
    c.arrive("c")
    c.charge("a", 1.0, prompt=1000)
    c.charge("c", 1.0, prompt=700)
    c.arrive("b")  # b was idle all along: its zero is not banked credit
    assert c.counters["b"] == 700
    c.leave("b")
    c.charge("a", 1.0, prompt=500)
    c.charge("c", 1.0, prompt=500)
    c.arrive("b")  # back again: lifted to the lowest of the others, never above it
    assert c.counters["b"] == 1200
    c.charge("b", 1.0, prompt=5000)
    c.leave("b")
    c.arrive("b")  # service had is not forgiven by leaving: no lift down
    assert c.counters["b"] == 6200


def test_a_tenant_that_still_has_work_is_not_lifted():
    c = TokenCounters()
    c.arrive("a")
    c.arrive("b")
    c.charge("a", 1.0, prompt=1000)
    c.arrive("b")  # b's second sequence while its first is in the engine
    assert c.counters["b"] == 0


def test_weights_share_the_tokens_in_their_ratio():
    c = TokenCounters()
    weights = {"a": 3.0, "b": 1.0}
    for t in weights:
        c.arrive(t)
    demand = {"a": (4, 0), "b": (4, 0)}
    got = {"a": 0, "b": 0}
    for _ in range(6000):
        for t, n in step(c, demand, weights).items():
            got[t] += n
    assert abs(got["a"] / got["b"] - 3.0) < 0.05


def test_prompt_tokens_cost_half_a_generated_one():
    c = TokenCounters()
    c.charge("a", 1.0, prompt=10)
    c.charge("b", 2.0, generated=10)
    assert c.counters == {"a": 10.0, "b": 10.0}


def test_a_tenant_alone_is_never_held_back():
    c = TokenCounters()
    c.arrive("a")
    c.charge("a", 1.0, prompt=10**6)
    assert c.rooms({"a": 1.0}) == {"a": float("inf")}
    demand = {"a": (4, 10_000), "b": (0, 0)}  # b is backlogged but has nothing to feed now
    c.arrive("b")
    for _ in range(100):
        assert step(c, demand, {"a": 1.0, "b": 1.0})["a"] == 4 + 32


def test_the_lowest_counter_gets_the_freed_slot():
    c = TokenCounters()
    c.charge("a", 1.0, prompt=300)
    c.charge("b", 1.0, prompt=200)
    c.charge("c", 1.0, prompt=250)
    assert c.lowest(["a", "b", "c"]) == "b"
    assert c.lowest(["a", "c"]) == "c"
    assert c.lowest(["new", "a"]) == "new"


def test_a_tenant_with_every_slot_gives_one_to_a_tenant_with_none():
    w = {"a": 1.0, "b": 1.0}
    assert gives_way({"a": 4}, w, "b", 4) == "a"
    assert gives_way({"a": 3, "b": 1}, w, "b", 4) == "a"  # 2 and 2 after
    assert gives_way({"a": 2, "b": 2}, w, "b", 4) is None  # at their shares
    w3 = {"a": 1.0, "b": 1.0, "c": 1.0}
    assert gives_way({"a": 2, "b": 1, "c": 1}, w3, "c", 4) is None  # it would move back and forth
    assert gives_way({"a": 3, "b": 1}, w3, "c", 4) == "a"
    assert gives_way({"a": 2, "b": 2}, w3, "c", 4) in ("a", "b")


def test_a_heavier_tenant_keeps_more_slots_and_a_slot_never_moves_back():
    w = {"a": 3.0, "b": 1.0}
    assert gives_way({"a": 3, "b": 1}, w, "a", 4) is None
    assert gives_way({"b": 4}, w, "a", 4) == "b"
    assert gives_way({"a": 3}, w, "b", 3) == "a"  # b's share is three quarters of a slot
    assert gives_way({"a": 2, "b": 1}, w, "a", 3) is None  # and once it has one, it keeps it
    assert gives_way({"a": 4}, w, "b", 4) == "a"
    assert gives_way({"a": 3, "b": 1}, w, "b", 4) is None


def test_slots_settle_whatever_the_order_of_the_asks():
    w = {"a": 1.0, "b": 2.0, "c": 1.0}
    held = {"a": 8}
    for _ in range(50):  # each tenant asks in turn, always with work waiting
        for t in ("b", "c", "a"):
            giver = gives_way(held, w, t, 8)
            if giver is not None:
                held[giver] -= 1
                held[t] = held.get(t, 0) + 1
    assert held == {"a": 2, "b": 4, "c": 2}
