"""workers_needed, the autoscaling figure (store/fleet.py): jobs over one worker's slots,
rounded up; the live workers' slots win over the declared figure; declared models resolve."""

from __future__ import annotations

import pytest

from store.fleet import Fleet, WorkerInfo
from toolq.errors import UnknownModel
from toolq.wire.protocol import JobRequest, Message


def worker(model: str, slots: int, wid: str = "w1") -> WorkerInfo:
    return WorkerInfo(id=wid, model=model, tools=(), slots=slots, max_jobs=slots)


@pytest.mark.parametrize(("depth", "needed"), [(0, 0), (1, 1), (16, 1), (17, 2), (33, 3)])
def test_workers_needed_is_jobs_over_slots_rounded_up(depth, needed):
    fleet = Fleet(declared={"big": 16})
    assert fleet.workers_needed("big", depth) == needed


def test_the_live_workers_slots_win_over_the_declared_figure():
    fleet = Fleet(workers=(worker("big", 4), worker("big", 8, "w2")), declared={"big": 16})
    assert fleet.slots_per_worker("big") == 8
    assert fleet.workers_needed("big", 17) == 3


def test_an_undeclared_model_without_workers_counts_one_slot_and_is_refused():
    fleet = Fleet(workers=(worker("small", 4),), declared={"big": 16})
    assert fleet.slots_per_worker("nope") == 1
    assert fleet.models() == ["big", "small"]
    request = JobRequest(messages=[Message(role="user", content="hi")], model="nope")
    with pytest.raises(UnknownModel, match="'nope'"):
        fleet.resolve(request)
    assert fleet.resolve(request.model_copy(update={"model": "big"})) == "big"
