"""--format auto: the tool-call format is read from the chat template's source, hermes when unknown."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from toolq.tools import ToolRegistry
from worker.app import build_loop
from worker.formats.choice import check_format_name, choose_format
from worker.settings import WorkerSettings
from worker.templates import TEMPLATES_DIR

HERMES_SOURCE = (TEMPLATES_DIR / "hermes3_tool_calling.j2").read_text()
PLAIN_SOURCE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def test_auto_detects_hermes_markup():
    choice = choose_format("auto", HERMES_SOURCE)
    assert (choice.name, choice.how, choice.warning) == ("hermes", "detected", None)


def test_auto_falls_back_to_hermes_and_says_so():
    choice = choose_format("auto", PLAIN_SOURCE)
    assert (choice.name, choice.how) == ("hermes", "fallback")
    assert choice.warning and "unknown" in choice.warning and "using hermes" in choice.warning


def test_a_named_format_is_used_as_asked():
    choice = choose_format("thoughtful_steps", HERMES_SOURCE)
    assert (choice.name, choice.how, choice.warning) == ("thoughtful_steps", "asked", None)


def test_an_unknown_name_lists_auto_and_the_formats():
    with pytest.raises(ValueError, match=r"unknown tool-call format 'nope'; available: auto, .*hermes"):
        check_format_name("nope")


def test_auto_is_the_default_with_the_models_own_template_only():
    assert WorkerSettings(chat_template="gguf").requested_format == "auto"
    assert WorkerSettings().requested_format == "hermes"
    assert WorkerSettings(chat_template="gguf", tool_format="mixtral").requested_format == "mixtral"


@pytest.mark.parametrize(("source", "how"), [(HERMES_SOURCE, "detected"), (PLAIN_SOURCE, "fallback")])
def test_the_worker_logs_the_format_it_chose(source, how):
    engine = SimpleNamespace(metadata={"tokenizer.chat_template": source}, bos_token="", eos_token="")
    with capture_logs() as logs:
        loop = build_loop(WorkerSettings(chat_template="gguf"), engine, ToolRegistry())  # type: ignore[arg-type]
    assert loop.fmt.name == "hermes"
    chosen = [e for e in logs if e["event"] == "tool-call format"]
    assert chosen and chosen[0]["chosen"] == how and chosen[0]["format"] == "hermes"
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert bool(warned) == (how == "fallback")
