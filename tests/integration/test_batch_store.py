"""A batch's end and its announcement are one transaction (store/batches.py): whatever gateway
ends a batch, and wherever it dies, an ended batch that names a webhook has its delivery."""

from __future__ import annotations

import json

import pytest

from store import keys
from store.arq_link import connect
from store.batches import BatchStore


@pytest.fixture
async def redis(redis_url):
    r = connect(redis_url)
    yield r
    await r.aclose()


async def deliveries(r, batch_id: str) -> list[dict]:
    out = []
    for d in await r.lrange(keys.job_deliveries(batch_id), 0, -1):
        h = {k.decode(): v.decode() for k, v in (await r.hgetall(keys.delivery(d.decode()))).items()}
        out.append({"type": h["type"], "url": h["url"], "batch": json.loads(h["event"])["batch"]})
    return out


async def test_an_ended_batch_is_announced_in_the_step_that_ends_it(redis):
    store = BatchStore(redis)
    batch_id = await store.create(
        "t", endpoint="/v1/chat/completions", input_file_id="file_1", window_s=60, metadata=None,
        lines=['{"custom_id": "a"}'], webhook_url="https://example.com/hook",
    )  # fmt: skip
    assert await deliveries(redis, batch_id) == []  # running: nothing to announce
    await store.answer(batch_id, 0, "a", '{"id": "a"}', ok=True)
    await store.finish(batch_id, "completed", output_file_id="file_2", error_file_id=None)
    [d] = await deliveries(redis, batch_id)
    assert (d["type"], d["url"]) == ("batch.completed", "https://example.com/hook")
    assert d["batch"]["status"] == "completed" and d["batch"]["output_file_id"] == "file_2"
    assert d["batch"]["request_counts"] == {"total": 1, "completed": 1, "failed": 0}
    assert d["batch"] == await store.view(batch_id)


async def test_a_failed_file_is_announced_as_it_is_written_and_no_webhook_means_no_delivery(redis):
    store = BatchStore(redis)
    failed = await store.create(
        "t", endpoint="/v1/chat/completions", input_file_id="file_1", window_s=60, metadata=None, lines=None,
        errors=[{"line": 1, "message": "not JSON"}], webhook_url="https://example.com/hook",
    )  # fmt: skip
    [d] = await deliveries(redis, failed)
    assert d["type"] == "batch.failed" and d["batch"]["errors"]["data"][0]["line"] == 1
    quiet = await store.create(
        "t", endpoint="/v1/chat/completions", input_file_id="file_1", window_s=60, metadata=None, lines=None,
        errors=[{"line": 1, "message": "not JSON"}],
    )  # fmt: skip
    assert await deliveries(redis, quiet) == []
