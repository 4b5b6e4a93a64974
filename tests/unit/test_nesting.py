"""toolq/wire/nesting.py: the depth of a JSON text measured without parsing it agrees with the depth of
the value it parses to, across slice boundaries, with brackets inside strings and escapes; a
value or text past the bound is refused naming the field, the depth and where."""

from __future__ import annotations

import json
import random

import pytest

from toolq.wire.nesting import TooDeep, check_depth, check_text_depth, text_depth


def depth_of(v: object) -> int:
    if isinstance(v, dict):
        return 1 + max((depth_of(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((depth_of(x) for x in v), default=0)
    return 0


def random_value(rng: random.Random, budget: int) -> object:
    kind = rng.random()
    if budget <= 0 or kind < 0.3:
        return rng.choice([1, "x", '[{"', "\\]", None, '}]\\"'])
    if kind < 0.65:
        return [random_value(rng, budget - 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}[": random_value(rng, budget - 1) for i in range(rng.randint(0, 3))}


@pytest.mark.parametrize("seed", range(40))
def test_the_text_depth_is_the_parsed_values_depth(seed):
    v = random_value(random.Random(seed), 12)
    text = json.dumps(v)
    assert text_depth(text) == depth_of(v)
    assert text_depth(text.encode()) == depth_of(v)


def test_depth_is_carried_across_the_slices_the_scan_works_in():
    padding = json.dumps(["y" * 50] * 5000)  # about 270 KB of shallow JSON first
    deep = "[" * 130 + "]" * 130
    assert text_depth(f"[{padding},{deep},{padding}]") == 131
    assert text_depth("[" * 300_000 + "]" * 300_000) == 300_000


def test_a_deep_value_is_refused_naming_field_depth_and_place():
    body = {"messages": [], "metadata": {"a": {"b": [[[{"c": 1}]]]}}}
    with pytest.raises(TooDeep) as e:
        check_text_depth(json.dumps(body), 5)
    assert e.value.field == "metadata" and e.value.depth == 7 and e.value.limit == 5
    assert str(e.value).startswith("metadata nests 7 levels deep, above the limit of 5")
    assert "metadata.a.b[0][0]" in str(e.value)
    with pytest.raises(TooDeep) as e2:
        check_depth(body, 5)
    assert e2.value.field == "metadata" and e2.value.depth == 7
    check_text_depth(json.dumps(body), 7)
    check_depth(body, 7)
