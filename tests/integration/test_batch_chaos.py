"""A batch survives its processes: two thousand lines on scripted workers, one worker SIGKILLed and
replaced mid-batch, and the gateway running the batch SIGKILLed and started again. Every custom_id
comes back exactly once across the output and error files, and no line became two jobs."""

from __future__ import annotations

import io
import json
import time

import openai
import redis

from store import keys
from tests.support.gateways import GatewayProcess
from tests.support.workers import WorkerProcess, write_rules

LINES = 2000
KEY = "chaos-key"


def _line(i: int) -> str:
    body = {"model": "scripted", "messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": 8}
    return json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})


def _gateway(url: str) -> GatewayProcess:
    env = {"TOOLQ_API_KEYS": f"{KEY}:chaos", "TOOLQ_BATCH_MAX_IN_FLIGHT": "32"}
    return GatewayProcess(url, env=env).wait_ready()


def _counts(c: openai.OpenAI, batch_id: str) -> int:
    b = c.batches.retrieve(batch_id)
    return b.request_counts.completed + b.request_counts.failed


def _wait_for(c: openai.OpenAI, batch_id: str, answered: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _counts(c, batch_id) < answered:
        assert time.monotonic() < deadline, f"fewer than {answered} lines answered in {timeout_s} s"
        time.sleep(0.2)


def test_a_batch_answers_every_line_once_through_worker_and_gateway_kills(redis_url):
    rules = write_rules([(".*", "done")], token_delay_s=0.002)
    env = {"TOOLQ_SLOTS": "8"}
    workers = [WorkerProcess(redis_url, script=rules, env=env).wait_ready() for _ in range(2)]
    gw = _gateway(redis_url)
    try:
        c = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=2, timeout=60)
        text = "\n".join(_line(i) for i in range(LINES)) + "\n"
        file_id = c.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id
        batch = c.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        assert batch.status == "in_progress" and batch.request_counts.total == LINES

        _wait_for(c, batch.id, LINES // 5, 120)
        workers[0].kill()  # its lines in flight are taken over by the other worker after their lease
        workers[0] = WorkerProcess(redis_url, script=rules, env=env).wait_ready()

        _wait_for(c, batch.id, LINES // 2, 120)
        gw.kill()  # the runner dies holding the batch's lease, with lines in flight
        gw = _gateway(redis_url)
        c = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=2, timeout=60)

        deadline = time.monotonic() + 300
        while (ended := c.batches.retrieve(batch.id)).status != "completed":
            # finalizing: its output files are being written, between in_progress and completed
            assert ended.status in ("in_progress", "finalizing") and time.monotonic() < deadline, ended
            time.sleep(0.5)
        out = [json.loads(x) for x in c.files.content(ended.output_file_id).text.splitlines()]
        err = (
            [json.loads(x) for x in c.files.content(ended.error_file_id).text.splitlines()]
            if ended.error_file_id
            else []
        )
    finally:
        gw.stop()
        for w in workers:
            w.stop()
    ids = [x["custom_id"] for x in out + err]
    assert len(ids) == LINES and set(ids) == {f"l{i}" for i in range(LINES)}, (len(ids), len(set(ids)))
    assert err == [], err[:3]
    assert ended.request_counts.completed == LINES
    jobs = {x["response"]["request_id"] for x in out}
    assert len(jobs) == LINES  # one job per line: a restarted runner found the jobs it had made
    r = redis.Redis.from_url(redis_url)
    made = sum(1 for _ in r.scan_iter(keys.idempotency("chaos", f"batch:{batch.id}:*"), count=1000))
    assert made == LINES, made  # each line's idempotency key names its one job
