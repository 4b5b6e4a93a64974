"""`pip install toolq` as a service that embeds the SDK does it: the light client in a scratch
virtual environment (tests/support/venvs.py), installed from the package index with no extra.

It installs at most 14 packages, resolves beside today's redis-py, loads no server part on
``import toolq``, and submits a job over HTTP, with the SDK and with the CLI, to a real stack:
a gateway and a scripted worker from this checkout's environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gateways import GatewayProcess
from tests.support.venvs import PIP_TIMEOUT_S, ScratchVenv, checkout_copy
from tests.support.workers import WorkerProcess, write_rules

pytestmark = [pytest.mark.venv, pytest.mark.timeout(2 * PIP_TIMEOUT_S + 300)]

MAX_PACKAGES = 14  # issue 29: the light client, toolq included
# What `import toolq` must not load: the services, the store and the server-side libraries.
SERVER_MODULES = (
    "arq", "redis", "msgpack", "jinja2", "rich", "structlog", "jsonschema", "llama_cpp", "fastapi",
    "starlette", "uvicorn", "pydantic_settings", "opentelemetry", "docstring_parser",
    "worker", "gateway", "webhooks", "store", "toolq.tools", "toolq.services",
)  # fmt: skip


def _store_loaded_by(code: str) -> list[str]:
    """The store's modules that a fresh interpreter of this checkout has loaded after ``code``."""
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return [m for m in json.loads(out.stdout.splitlines()[-1]) if m == "store" or m.startswith("store.")]


def test_import_toolq_loads_nothing_of_the_store_even_beside_it():
    # this checkout's environment has every extra installed, so only the imports keep the store out
    assert _store_loaded_by("import toolq") == []
    assert _store_loaded_by("import toolq.client.webhooks, toolq.webhooks.deliveries") == []
    # the SDK's Redis mode is the store's client: it loads it when asked for, not before
    assert "store.jobstore" in _store_loaded_by("import toolq; toolq.Client(redis_url='redis://127.0.0.1:1')")


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> tuple[ScratchVenv, Path]:
    root = tmp_path_factory.mktemp("light")
    src = checkout_copy(root / "src")
    venv = ScratchVenv(root / "venv")
    venv.pip("install", str(src))
    return venv, src


def test_the_light_client_is_small_and_resolves_beside_redis_8(light):
    venv, src = light
    installed = venv.packages()
    assert "toolq" in installed
    assert len(installed) <= MAX_PACKAGES, sorted(installed)
    for server_part in ("arq", "redis", "jinja2", "rich", "structlog", "msgpack", "fastapi", "llama-cpp-python"):
        assert server_part not in installed, sorted(installed)
    # a service on today's redis-py can embed it (arq's redis<6 pin is the worker's alone)
    out = venv.pip("install", "--dry-run", str(src), "redis==8.1.0", check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    # and so do the gateway and the webhook sender: no arq in their extras
    out = venv.pip("install", "--dry-run", f"{src}[gateway,webhooks]", "redis==8.1.0", check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_toolq_loads_no_server_part(light):
    venv, _ = light
    code = "import json, sys, toolq; print(json.dumps([toolq.__file__, sorted(sys.modules)]))"
    out = venv.run("python", "-c", code)
    assert out.returncode == 0, out.stderr
    where, modules = json.loads(out.stdout)
    assert where.startswith(str(venv.path)), where  # the installed copy, not this checkout
    loaded = [m for m in modules if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES)]
    assert loaded == []
    # a request with a tool definition builds without jsonschema (the gateway checks its schema)
    # and still refuses what the protocol itself checks
    code = (
        "from toolq.client import build_request\n"
        "tool = {'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}\n"
        "print(build_request('hi', tools=[tool]).tool_names())\n"
        "try:\n"
        "    build_request('hi', tools=[{'type': 'function', 'function': {'name': 'bad name'}}])\n"
        "except ValueError as e:\n"
        "    print('refused', 'bad name' in str(e))\n"
    )
    out = venv.run("python", "-c", code)
    assert out.stdout.split("\n")[:2] == ["['f']", "refused True"], out.stdout + out.stderr
    # what needs an extra says which one
    out = venv.run("python", "-c", "import toolq; toolq.Client(redis_url='redis://127.0.0.1:1')")
    assert "pip install 'toolq[redis]'" in out.stderr
    out = venv.run("python", "-c", "import toolq; toolq.tool")
    assert "No module named" in out.stderr
    for command, extra in ((["demo"], "toolq[worker,gateway]"), (["tools", "serve", "m"], "toolq[tools]")):
        out = venv.run("toolq", *command)
        assert out.returncode == 2 and f"pip install '{extra}'" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


def test_the_light_client_runs_a_job_over_http(light, redis_url):
    venv, _ = light
    rules = write_rules([("from the light client", "answered the light client"), ("from its CLI", "answered its CLI")])
    worker = WorkerProcess(redis_url, script=rules).wait_ready()
    gateway = GatewayProcess(redis_url).wait_ready()
    try:
        code = (
            "import sys, toolq\n"
            "with toolq.SyncClient(sys.argv[1]) as client:\n"
            "    result = client.run('a job from the light client', model='scripted', timeout=60)\n"
            "print(result.status.value, result.content)\n"
        )
        out = venv.run("python", "-c", code, gateway.url, timeout=90)
        assert out.returncode == 0, out.stderr + worker.output() + gateway.output()
        assert out.stdout.strip() == "succeeded answered the light client"
        # the CLI's client commands, without rich: plain lines
        out = venv.run("toolq", "submit", "--follow", "--url", gateway.url, "a job from its CLI", timeout=90)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "answered its CLI" in out.stdout and "[/" not in out.stdout, out.stdout
    finally:
        gateway.stop()
        worker.stop()
