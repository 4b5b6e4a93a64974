"""The SDK's Redis mode (`pip install 'toolq[redis]'`) on redis-py 5 and 8, each in a scratch
virtual environment (tests/support/venvs.py): a job submitted straight into Redis, with the store's
own checks, runs to its end on a worker of this checkout's environment, which keeps arq and its
redis<6 pin (worker/pickup.py)."""

from __future__ import annotations

import json

import pytest

from tests.support.venvs import PIP_TIMEOUT_S, ScratchVenv, checkout_copy
from tests.support.workers import WorkerProcess, write_rules

pytestmark = [pytest.mark.venv, pytest.mark.timeout(PIP_TIMEOUT_S + 300)]

# The floor of the extra's redis-py (pyproject.toml) and today's release.
REDIS_PY = ("5.0.1", "8.1.0")

SUBMIT = """
import asyncio, json, sys

import redis

from toolq import Client, errors


async def main(url: str) -> None:
    async with Client(redis_url=url) as client:
        job_id = await client.submit("a job from redis-py " + redis.__version__, model="scripted")
        types = [e.type.value async for e in client.events(job_id)]
        result = await client.result(job_id, timeout=30)
        try:  # the store's checks answer here as the gateway would
            await client.submit("hello", model="no-such-model")
            refused = ""
        except errors.ToolqError as e:
            refused = e.code
    print(json.dumps({"redis": redis.__version__, "types": types, "content": result.content, "refused": refused}))


asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("redis_py", REDIS_PY)
def test_the_redis_mode_runs_a_job_on_redis_py(redis_py, redis_url, tmp_path):
    src = checkout_copy(tmp_path / "src")
    venv = ScratchVenv(tmp_path / "venv")
    venv.pip("install", f"{src}[redis]", f"redis=={redis_py}")
    installed = venv.packages()
    assert installed["redis"] == redis_py and "arq" not in installed, installed

    rules = write_rules([("a job from redis-py", "ran on the worker")])
    worker = WorkerProcess(redis_url, script=rules).wait_ready()
    try:
        out = venv.run("python", "-c", SUBMIT, redis_url, timeout=120)
        assert out.returncode == 0, out.stderr + worker.output()
        got = json.loads(out.stdout)
    finally:
        worker.stop()
    assert got["redis"] == redis_py
    assert got["types"][0] == "queued" and got["types"][-1] == "final", got
    assert got["content"] == "ran on the worker"
    assert got["refused"] == "unknown_model", got
