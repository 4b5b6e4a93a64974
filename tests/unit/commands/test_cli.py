"""`toolq` answers bad input with one line naming the problem and a non-zero exit, never a traceback.

Each case runs the real command in a subprocess (`python -m toolq ...` from the repository root),
as a person would. The service subcommands come from the `toolq.commands` entry points.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from toolq.commands import cli
from toolq.local import free_port

REPO = Path(__file__).resolve().parents[3]
HI = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
TEMPLATE = "chat_templates/hermes3_tool_calling.j2"


def toolq(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLQ_")}
    return subprocess.run(
        [sys.executable, "-m", "toolq", *args],
        input=stdin,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
    )


def assert_one_line(done: subprocess.CompletedProcess, *needles: str, code: int = 2) -> None:
    shown = f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == code, shown
    assert "Traceback" not in done.stderr + done.stdout, shown
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    for needle in needles:
        assert needle in lines[0], shown


@pytest.fixture
def rules(tmp_path: Path) -> str:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"rules": [{"when": ".", "reply": "hi"}]}))
    return str(path)


# ---------------------------------------------------------------- the commands exist, lightly


def test_service_commands_register_without_importing_the_services():
    code = (
        "import sys; from toolq.commands.cli import build_parser; p = build_parser(); "
        "sub = next(a for a in p._actions if a.dest == 'command'); print(sorted(sub.choices)); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'llama_cpp', 'fastapi', 'uvicorn', 'starlette', "
        "'jinja2', 'sse_starlette'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    commands, heavy = done.stdout.splitlines()
    assert commands == str(
        sorted(
            [
                "demo",
                "events",
                "gateway",
                "parse",
                "render",
                "submit",
                "threads",
                "tools",
                "webhooks",
                "worker",
                "workers",
            ]
        )
    )
    assert heavy == "[]"


def test_the_readme_debug_commands_work():
    call = '<tool_call>{"name": "calculate_zorbix", "arguments": {"zorb": 1, "bix": 2}}</tool_call>'
    parsed = toolq("parse", stdin=call)
    assert parsed.returncode == 0, parsed.stderr
    assert json.loads(parsed.stdout)["tool_calls"][0]["name"] == "calculate_zorbix"
    rendered = toolq("render", "--template", TEMPLATE, stdin=HI)
    assert rendered.returncode == 0, rendered.stderr
    assert "<|im_start|>user\nhi<|im_end|>" in rendered.stdout
    assert rendered.stderr.strip() == "toolq render: tool-call format hermes (detected)"


def test_render_says_when_the_format_is_unknown():
    rendered = toolq("render", "--template", "chat_templates/llama2.j2", stdin=HI)
    assert rendered.returncode == 0, rendered.stderr
    assert "tool-call format hermes (fallback)" in rendered.stderr and "Pass --format" in rendered.stderr


# ---------------------------------------------------------------- submit and events


def test_submit_to_an_unreachable_gateway():
    done = toolq("submit", "hi", "--url", f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 3 and "Traceback" not in done.stdout + done.stderr
    assert "cannot reach the gateway" in done.stdout + done.stderr


@pytest.mark.parametrize("command", [["submit", "hi"], ["events", "job_00000000000000000000"]])
@pytest.mark.parametrize("url", ["notaurl", "ftp://example.com", "http://[::1"])
def test_submit_and_events_with_a_bad_gateway_url(command, url):
    assert_one_line(toolq(*command, "--url", url), f"bad gateway URL {url!r}")


def test_a_bad_gateway_url_from_the_environment():
    assert_one_line(toolq("events", "job_x", env={"TOOLQ_URL": "nope"}), "bad gateway URL 'nope'")


# ---------------------------------------------------------------- parse


def test_parse_with_an_unknown_format():
    assert_one_line(toolq("parse", "--format", "nope", stdin="x"), "unknown tool-call format 'nope'", "hermes")


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "cannot read the tools file"),
        ("not json", "is not JSON"),
        ('["calculate_zorbix"]', "must hold a list of OpenAI function specs"),
        ('{"functions": []}', "must hold a list of OpenAI function specs"),
    ],
)
def test_parse_with_a_bad_tools_file(tmp_path, content, needle):
    path = tmp_path / "tools.json"
    if content is not None:
        path.write_text(content)
    assert_one_line(toolq("parse", "--tools", str(path), stdin="x"), needle, str(path))


# ---------------------------------------------------------------- render


def test_render_with_a_missing_template(tmp_path):
    missing = tmp_path / "missing.j2"
    assert_one_line(toolq("render", "--template", str(missing), stdin=HI), "cannot read chat template", str(missing))


# Like Qwen-QwQ-32B's template: an earlier assistant turn's content is split, and it is None when
# the turn holds only tool calls.
QWQ_LIKE = (
    "{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}{%- set content = m.content %}"
    "{%- if not loop.last %}{%- set content = m.content.split('</think>')[-1] %}{%- endif %}"
    "{{- '<|im_start|>assistant' }}{%- if m.content %}{{- '\\n' + content }}{%- endif %}"
    '{%- for tc in m.tool_calls %}{{- \'\\n<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' '
    "+ (tc.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
)

# A call turn with only calls, then its result.
CALL_REQUEST = {
    "messages": [
        {"role": "user", "content": "zorbix of 1 and 2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "calculate_zorbix", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    ]
}


@pytest.mark.parametrize(
    "source,needle",
    [
        ("{% for m in messages %}{{ m.content }", "does not compile: line 1"),
        ("{{ raise_exception('this template wants alternating roles') }}", "this template wants alternating roles"),
        ("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}", "failed at line 2: TypeError"),
    ],
)
def test_render_with_a_template_that_fails(tmp_path, source, needle):
    path = tmp_path / "bad.j2"
    path.write_text(source)
    assert_one_line(toolq("render", "--template", str(path), stdin=json.dumps(CALL_REQUEST)), needle)


def test_render_gives_a_qwq_like_template_the_content_it_needs(tmp_path):
    # The probe found that earlier call turns need content "" (worker/templates/probe.py).
    path = tmp_path / "qwq.j2"
    path.write_text(QWQ_LIKE)
    rendered = toolq("render", "--template", str(path), stdin=json.dumps(CALL_REQUEST))
    assert rendered.returncode == 0, rendered.stderr
    assert '<tool_call>\n{"name": "calculate_zorbix", "arguments": {}}\n</tool_call>' in rendered.stdout


@pytest.mark.parametrize(
    "stdin,needles",
    [
        ('{"messages": "x"}', ["invalid request", "messages"]),
        ('{"messages": [{"role": "wizard", "content": "hi"}]}', ["invalid request", "messages.0"]),
        ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}', ["invalid request", "max_tokens"]),
        ("{not json", ["the request on stdin is not JSON"]),
        ("", ["the request on stdin is not JSON"]),
        ("3", ['must be a JSON object with "messages"']),
    ],
)
def test_render_with_a_bad_request(stdin, needles):
    assert_one_line(toolq("render", "--template", TEMPLATE, stdin=stdin), *needles)


def test_render_with_an_unknown_format():
    assert_one_line(toolq("render", "--template", TEMPLATE, "--format", "nope", stdin=HI), "unknown tool-call format")


# ---------------------------------------------------------------- worker (fails before any model loads)


def test_worker_with_a_model_file_that_does_not_exist(tmp_path):
    missing = tmp_path / "nope.gguf"
    assert_one_line(toolq("worker", "--model", str(missing)), "model file not found", str(missing))


@pytest.mark.parametrize(
    "flags,needles",
    [
        (["--template", "no_such_template.j2"], ["cannot read chat template", "no_such_template.j2"]),
        (["--format", "nope"], ["unknown tool-call format 'nope'"]),
        (["--tools", "no_such_tool_module"], ["cannot load tool module 'no_such_tool_module'"]),
        (["--redis", "notaurl"], ["bad Redis URL 'notaurl'"]),
        (["--max-jobs", "0"], ["invalid setting", "max_jobs"]),
        (["--mcp", "{nope"], ["--mcp '{nope' is not JSON"]),
        (
            ["--mcp", '{"name": "a", "url": "http://h"}', "--mcp", '{"name": "b"}'],
            ["MCP server #2 ('b')", "exactly one"],
        ),
    ],
)
def test_worker_with_a_bad_flag(rules, flags, needles):
    assert_one_line(toolq("worker", "--engine", "scripted", "--script", rules, *flags), *needles)


def test_worker_flash_attention_is_on_by_default_and_a_bad_value_is_refused(rules, monkeypatch):
    from worker.settings import WorkerSettings

    monkeypatch.delenv("TOOLQ_FLASH_ATTN", raising=False)
    assert WorkerSettings().flash_attn is True
    monkeypatch.setenv("TOOLQ_FLASH_ATTN", "false")
    assert WorkerSettings().flash_attn is False
    out = toolq("worker", "--engine", "scripted", "--script", rules, env={"TOOLQ_FLASH_ATTN": "maybe"})
    assert_one_line(out, "invalid setting", "flash_attn")


def test_worker_with_a_template_that_does_not_compile(rules, tmp_path):
    path = tmp_path / "broken.j2"
    path.write_text("{% if %}")
    assert_one_line(
        toolq("worker", "--engine", "scripted", "--script", rules, "--template", str(path)),
        "broken.j2 does not compile",
    )


def test_worker_with_a_redis_that_does_not_answer(rules):
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line(
        toolq("worker", "--engine", "scripted", "--script", rules, "--redis", url), f"cannot reach Redis at {url}"
    )


@pytest.mark.parametrize("script,needle", [(None, "needs --script"), ("/nonexistent/rules.json", "cannot read")])
def test_worker_scripted_without_a_usable_script(script, needle):
    assert_one_line(toolq("worker", "--engine", "scripted", *(["--script", script] if script else [])), needle)


# ---------------------------------------------------------------- gateway and demo


@pytest.mark.parametrize(
    "flags,env,needles",
    [
        (["--port", "70000"], {}, ["invalid setting", "port"]),
        (["--redis", "notaurl"], {}, ["bad Redis URL 'notaurl'"]),
        ([], {"TOOLQ_API_KEYS": "no-tenant-here"}, ["invalid setting", "api_keys", "key:tenant"]),
        ([], {"TOOLQ_AFFINITY_WAIT_MS": "-1"}, ["invalid setting", "affinity_wait_ms", "greater than or equal to 0"]),
        ([], {"TOOLQ_AFFINITY_WAIT_MS": "soon"}, ["invalid setting", "affinity_wait_ms"]),
        (
            [],
            {"TOOLQ_AFFINITY_WAIT_MS": "600000"},
            ["invalid setting", "affinity_wait_ms", "less than or equal to 60000"],
        ),
    ],
)
def test_gateway_with_a_bad_setting(flags, env, needles):
    assert_one_line(toolq("gateway", *flags, env=env), *needles)


def test_demo_with_a_redis_that_does_not_answer():
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line(toolq("demo", "--redis", url), f"Redis at {url} does not answer")


# ---------------------------------------------------------------- a service whose extra is not installed


def _entry_point(register=None, error: Exception | None = None, requires=()):
    def load():
        if error is not None:
            raise error
        return register

    return SimpleNamespace(name="worker", load=load, dist=SimpleNamespace(requires=list(requires)))


def _register_worker(subparsers):
    subparsers.add_parser("worker").set_defaults(func=lambda args: 0)


def test_a_missing_extra_is_named_and_the_other_commands_still_work(monkeypatch, capsys):
    missing = 'surely-not-installed-toolq-dep>=1; extra == "worker"'
    monkeypatch.setattr(cli, "entry_points", lambda group: [_entry_point(_register_worker, requires=[missing])])
    assert cli.main(["worker"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "toolq worker: needs the worker extra (surely-not-installed-toolq-dep is not installed): "
        "pip install 'toolq[worker]'"
    )
    assert cli.build_parser().parse_args(["submit", "hi"]).command == "submit"


def test_a_service_that_cannot_be_imported_is_named(monkeypatch, capsys):
    broken = _entry_point(error=ModuleNotFoundError("No module named 'worker'"))
    monkeypatch.setattr(cli, "entry_points", lambda group: [broken])
    assert cli.main(["worker", "--gpu", "0", "--model", "x.gguf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("toolq worker: needs the worker extra") and err.endswith("pip install 'toolq[worker]'")
    assert cli.build_parser().parse_args(["events", "job_1"]).command == "events"


def test_requirements_of_other_extras_are_not_asked_for(monkeypatch):
    requires = ['surely-not-installed-toolq-dep; extra == "gateway"', 'pydantic>=2; extra == "worker"']
    monkeypatch.setattr(cli, "entry_points", lambda group: [_entry_point(_register_worker, requires=requires)])
    assert cli.main(["worker"]) == 0
