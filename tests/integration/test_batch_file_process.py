"""A batch's input file is read in the gateway's batch files' process (gateway/check_process.py),
never in the gateway's own, where its seconds of checks would hold the event loop's GIL
(bench/bench_batch_create.py); its verdicts come back line by line as before."""

from __future__ import annotations

import json

from gateway.openai.batches import lines
from gateway.settings import GatewaySettings
from tests.integration.gateway_support import asgi_client, register_fake_worker

URL = "/v1/chat/completions"


def line(custom_id: str) -> str:
    body = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": URL, "body": body})


async def test_a_batch_file_is_read_in_a_process_of_its_own(redis_url, monkeypatch):
    register_fake_worker(redis_url, "alpha", [])

    def here(*_args: object) -> None:
        raise AssertionError("a batch file was read in the gateway's own process")

    monkeypatch.setattr(lines, "read_lines", here)  # this process's copy only
    s = GatewaySettings(redis_url=redis_url, fleet_cache_s=0, api_keys={"a-key": "a"})
    async with asgi_client(s, Authorization="Bearer a-key") as a:
        for text, status in (("\n".join([line("c1"), "not json", line("c1")]), "failed"), (line("c1"), "in_progress")):
            up = await a.post("/v1/files", files={"file": ("in.jsonl", text.encode())}, data={"purpose": "batch"})
            assert up.status_code == 200, up.text
            create = {"input_file_id": up.json()["id"], "endpoint": URL, "completion_window": "24h"}
            made = await a.post("/v1/batches", json=create)
            assert made.status_code == 200, made.text
            view = made.json()
            assert view["status"] == status
            if status == "failed":
                errors = [(e["code"], e["line"]) for e in view["errors"]["data"]]
                assert errors == [("invalid_json_line", 2), ("duplicate_custom_id", 3)]
            else:
                assert view["request_counts"]["total"] == 1
