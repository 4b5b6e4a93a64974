"""The chaos soak (bench/chaos.py) in its short form: jobs over three worker processes while one
worker is SIGKILLed and Redis (append-only file on) is killed and restarted. No job is lost, each
has exactly one terminal event, no tool runs twice and no seq is skipped; and its fair-share form
(through two gateway processes), which must also meet the fairness figures while it does."""

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


def test_short_fair_chaos_soak_meets_the_fairness_figures_and_loses_nothing():
    """Fair share through 2 gateway processes and 3 workers, with worker kills and a Redis
    restart (bench/chaos_fair.py): B's probes behind A's flood start within two mean job
    durations, heavy:light start shares under weights 3:1 stay within 5 points of 75/25, and
    nothing is lost or run twice."""
    report = run(short_options(seed=1, fair=True))
    text = report.text()
    print(text)
    assert report.submitted == report.options.jobs, text
    assert report.drained, text
    assert len(report.kills) >= 2 and report.redis_stopped_at is not None, text
    assert report.lost == [] and report.wrong_terminals == [], text
    assert report.tools_twice == [] and report.seq_gaps == [] and report.duplicate_jobs == 0, text
    assert report.foreign_exits == [], text
    fair = report.fairness
    assert fair is not None, text
    assert fair.share_window >= 100 and abs(fair.share_error) <= 0.05, text
    waits = fair.waits_in_durations
    assert len(waits) == fair.plan.probes and max(waits) <= 2.0, text
    assert all(n > 0 for n in fair.flood_waiting_at_probe), text  # each probe really waited behind the flood
    assert fair.misses() == [], text
