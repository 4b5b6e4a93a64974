"""Scale from zero (issue 32): a model the gateway declares takes jobs before any worker serves it;
its `queued` event, /v1/models and /metrics say so and how many workers the backlog needs; a worker
started afterwards runs the waiting jobs. An undeclared model with no worker is still refused."""

from __future__ import annotations

import asyncio

import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import ZORBIX_RULES, asgi_client
from tests.support.workers import WorkerProcess, write_rules

JOB = {
    "model": "scripted",
    "messages": [{"role": "user", "content": "zorbix of 15 and 7?"}],
    "tools": ["calculate_zorbix"],
}


async def _final_answer(c, job_id: str) -> dict:
    async def done() -> dict:
        while True:
            r = await c.get(f"/v1/jobs/{job_id}")
            assert r.status_code == 200, r.text
            body = r.json()
            if body["status"] in ("succeeded", "failed", "cancelled"):
                return body
            await asyncio.sleep(0.1)

    return await asyncio.wait_for(done(), 60)


async def test_a_declared_model_waits_for_its_first_worker_then_runs(redis_url):
    settings = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, declared_models={"scripted": 2})
    async with asgi_client(settings) as c:
        assert (await c.get("/readyz")).status_code == 200  # it can take jobs: the probe lets traffic in
        ids = []
        for _ in range(3):
            r = await c.post("/v1/jobs", json=JOB)
            assert r.status_code == 202, r.text
            ids.append(r.json()["job_id"])
        queued = [await _queued(c, job_id) for job_id in ids]
        assert [(q["model"], q["workers"], q["waiting"]) for q in queued] == [
            ("scripted", 0, 1),
            ("scripted", 0, 2),
            ("scripted", 0, 3),
        ]
        model = (await c.get("/v1/models/scripted")).json()
        assert (model["workers"], model["declared"], model["queue_depth"]) == (0, True, 3)
        assert (model["slots_per_worker"], model["workers_needed"]) == (2, 2)  # ceil(3 / 2)
        assert 'toolq_workers_needed{model="scripted"} 2.0' in (await c.get("/metrics")).text
        # undeclared, no worker: today's answers, 404 for the model and unknown_model for its submit
        assert (await c.get("/v1/models/other")).status_code == 404
        r = await c.post("/v1/jobs", json={**JOB, "model": "other"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_model", r.text
        assert "'other'" in r.json()["error"]["message"]

        worker = WorkerProcess(redis_url, script=write_rules(ZORBIX_RULES), extra=("--slots", "2")).wait_ready()
        try:
            for job_id in ids:
                body = await _final_answer(c, job_id)
                assert body["status"] == "succeeded", body
                assert "22" in body["result"]["content"]
            model = (await c.get("/v1/models/scripted")).json()
            assert (model["workers"], model["queue_depth"], model["workers_needed"]) == (1, 0, 0)
            # served now: the queued event of a new job says nothing about waiting for a worker
            r = await c.post("/v1/jobs", json=JOB)
            assert set(await _queued(c, r.json()["job_id"])) == {"model", "attempt"}
        finally:
            worker.stop()


async def _queued(c, job_id: str) -> dict:
    """The data of the job's first event, the ``queued`` one."""
    first = (await c.app.state.toolq.store.events(job_id, count=1))[0]
    assert first.type == "queued"
    return first.data


@pytest.mark.parametrize("declared", ["scripted:4,big:16", '{"scripted": 4, "big": 16}'])
def test_declared_models_read_from_the_environment(monkeypatch, declared):
    monkeypatch.setenv("TOOLQ_DECLARED_MODELS", declared)
    assert GatewaySettings().declared_models == {"scripted": 4, "big": 16}


def test_a_declared_model_without_slots_counts_one_and_bad_ones_are_refused(monkeypatch):
    monkeypatch.setenv("TOOLQ_DECLARED_MODELS", "solo")
    assert GatewaySettings().declared_models == {"solo": 1}
    monkeypatch.setenv("TOOLQ_DECLARED_MODELS", "solo:0")
    with pytest.raises(ValueError, match="TOOLQ_DECLARED_MODELS"):
        GatewaySettings()
