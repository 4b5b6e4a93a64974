"""The failover soak (bench/chaos.py --failover) in its short form: 80 jobs through two gateways
and three workers on a Sentinel-watched Redis (real redis-server processes: a primary, a replica,
three sentinels) while the primary is SIGKILLed, the replica promoted and the old primary brought
back as a replica. With WAIT on, no acknowledged job is lost, each has exactly one terminal event,
no tool runs twice and no seq is skipped."""

from __future__ import annotations

import pytest

from bench.chaos_failover import run_failover, short_failover_options

pytestmark = pytest.mark.timeout(400)


def test_short_failover_soak_with_wait_loses_nothing_and_repeats_nothing():
    report = run_failover(short_failover_options(wait_replicas=1))
    text = report.text()
    assert report.acknowledged == report.options.jobs, text
    assert report.drained, text
    assert report.killed_at_s is not None and report.promoted_after_s is not None, text
    assert report.rejoined_after_s is not None, text  # the old primary came back as a replica
    assert report.lost == [], text
    assert report.wrong_terminals == [], text
    assert report.tools_twice == [], text
    assert report.seq_gaps == [], text
    assert report.first_finished_after_s is not None, text
