"""The chaos soak (bench/chaos.py) in its short form: jobs over three worker processes while one
worker is SIGKILLed and Redis (append-only file on) is killed and restarted. No job is lost, each
has exactly one terminal event, no tool runs twice and no seq is skipped."""

from __future__ import annotations

from bench.chaos import run, short_options


def test_short_chaos_soak_loses_nothing_and_repeats_nothing():
    report = run(short_options(seed=1))
    text = report.text()
    assert report.submitted == report.options.jobs, text
    assert report.drained, text
    assert len(report.kills) == 1 and report.redis_stopped_at is not None, text
    assert report.lost == [], text
    assert report.wrong_terminals == [], text
    assert report.tools_twice == [], text
    assert report.seq_gaps == [], text
    assert report.duplicate_jobs == 0, text
    assert report.elapsed_s < 60, text
