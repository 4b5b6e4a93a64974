"""A worker's load as dispatch.lua reads it (worker/load.py): a job writing its ending counts as
free in every write until the queue has it back, the heartbeat's forced writes included, so a
caller's follow-up posted the moment the ending is out finds its worker free (affinity), not
full."""

from __future__ import annotations

from typing import Any, cast

from store import keys
from store.jobstore import JobStore
from worker.load import report_load
from worker.settings import WorkerSettings
from worker.state import WorkerState

NOT_USED = cast(Any, None)  # report_load reads the counts, the store and the names only


async def test_a_job_writing_its_ending_is_free_in_every_write(redis_url):
    store = JobStore.from_url(redis_url)
    state = WorkerState(
        settings=WorkerSettings(),
        engine=NOT_USED,
        loop=NOT_USED,
        store=store,
        leases=NOT_USED,
        registry=NOT_USED,
        model="m",
        worker_id="w1",
        max_jobs=1,
    )

    async def load() -> bytes | None:
        return cast("bytes | None", await store.redis.hget(keys.worker_load("m"), "w1"))

    state.active = 1  # the queue handed over one job: full
    await report_load(state)
    assert await load() == b"1 1"
    state.finishing.add("job_1")  # its ending is about to go out
    await report_load(state)
    assert await load() == b"0 1"
    await report_load(state, force=True)  # a heartbeat in between
    assert await load() == b"0 1"
    state.active -= 1  # the queue has it back (worker/app.py)
    state.finishing.discard("job_1")
    await report_load(state, force=True)
    assert await load() == b"0 1"
    await store.close()
