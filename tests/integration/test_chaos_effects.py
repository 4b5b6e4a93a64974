"""The effects soak (bench/chaos_effects.py) in its short form: jobs whose tools send keyed effects
to a sink in another process while the worker or tool service running them is SIGKILLed. The
deduplicating sink holds exactly one effect per call: none missing, none under a new key; no job
is lost and every job has one terminal event with its seqs in order."""

from __future__ import annotations

from bench.chaos_effects import run_effects, short_effect_options


def test_short_effects_soak_has_every_effect_once():
    report = run_effects(short_effect_options(seed=1))
    text = report.text()
    print(text)
    assert report.submitted == report.options.jobs, text
    assert report.drained, text
    assert report.worker_kills and report.service_kills, text
    assert len(report.expected) == 3 * report.options.jobs, text
    assert report.missing == set() and report.unexpected == set(), text
    assert report.lost == [] and report.wrong_terminals == [] and report.out_of_order == [], text
