"""JobRecord, the job hash's one codec: every field a Lua script writes or reads is one it knows,
and ``from_hash`` then ``to_hash`` gives the hash back as written. (The same round trip on hashes
the scripts wrote in a real Redis: tests/integration/test_jobstore.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

from store import records
from store.records import ANSWER_PREFIX, FIELDS, SCRIPT_ONLY, JobRecord
from toolq.wire.protocol import JobRequest, JobResult, JobStatus, Message

LUA = Path(records.__file__).parent / "lua"
# A call on a job hash: ('HSET', job, 'status', ...) or, in claim/unstall, on a key built for the job.
_HASH_CALL = re.compile(r"redis\.call\('(HSET|HMGET|HGET|HINCRBY)',\s*(job|key|job_prefix[^,]*),([^)]*)\)")


def _fields_the_scripts_name() -> set[str]:
    named: set[str] = set()
    for script in LUA.rglob("*.lua"):  # entry scripts and snippets (lua/lib/)
        if script.name.startswith("webhook_"):
            continue  # their `key` is a delivery's hash (store/deliveries.py), not a job's
        for op, _, rest in _HASH_CALL.findall(script.read_text()):
            args = [a.strip() for a in rest.split(",") if a.strip()]
            fields = args[::2] if op == "HSET" else args[:1] if op == "HINCRBY" else args  # HSET: field, value, ...
            # an answer's own field: the prefix and its call id (records.ANSWER_PREFIX)
            fields = ["'" + ANSWER_PREFIX + "*'" if f.startswith("answer_prefix ..") else f for f in fields]
            assert all(re.fullmatch(r"'([a-z_]+|answer:\*)'", f) for f in fields), (script.name, fields)
            named.update(f.strip("'") for f in fields)
    return named


def test_the_codec_knows_every_field_the_scripts_name():
    named = _fields_the_scripts_name()
    assert {"request", "status", "attempt", "terminal", "actions", "finished_ms"} <= named  # the regex sees them
    assert named <= set(FIELDS) | set(SCRIPT_ONLY) | {ANSWER_PREFIX + "*"}
    assert ANSWER_PREFIX + "*" in named  # answer.lua writes each answer on its own


def _hash(**fields: str) -> dict[bytes, bytes]:
    return {k.encode(): v.encode() for k, v in fields.items()}


def test_a_full_hash_round_trips_and_reads_typed():
    request = JobRequest(messages=[Message(role="user", content="hi")]).model_dump_json()
    result = JobResult(job_id="job_1", status=JobStatus.succeeded, finish_reason="stop", content="ok")
    call = {"id": "c1", "name": "f", "arguments": {}, "kind": "client", "where": "client", "answer": None}
    actions = {"c1": call, "c2": {**call, "id": "c2"}}
    raw = {
        "request": request,
        "model": "m",
        "tenant": "t",
        "status": "succeeded",
        "attempt": "2",
        "seq": "9",
        "created_ms": "1000",
        "checkpoint": json.dumps({"messages": [], "iterations": 1}),
        "actions": json.dumps(actions),
        "answered": "1",
        "answer:c2": json.dumps({"content": "42"}),
        "action_deadline_ms": "5000",
        "terminal": "1",
        "result": result.model_dump_json(),
        "finished_ms": "2000",
        "priority": "7",
        "job_tokens": "4000",
        "webhook": json.dumps({"url": "https://example.com/hook", "events": ["completed"]}),
        "thread": "thr_1",
        "thread_from": "3",
        "thread_keep": "partial",
        "thread_strategy": "enqueue",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "vendor=v1",
        "worker": "w1",
        "prefer": "w1",
        "prefer_until": "1300",
        "placed": "affinity",
        "placed_ms": "1100",
        "worker_attempt": "2",
        "attempts": json.dumps([{"attempt": 1, "worker": "w0", "ended": "lease_expired", "ms": 1200}]),
        "lost_attempts": "1",
        "quarantined": "1",
    }
    assert set(raw) == set(FIELDS) | {"answer:c2"}
    rec = JobRecord.from_hash("job_1", _hash(**raw))
    assert rec.to_hash() == raw
    assert (rec.status, rec.attempt, rec.seq, rec.terminal, rec.finished_ms) == (JobStatus.succeeded, 2, 9, True, 2000)
    assert rec.request.messages[0].content == "hi"
    assert rec.result == result
    assert rec.checkpoint == {"messages": [], "iterations": 1}
    assert rec.actions == {"c1": call, "c2": {**call, "id": "c2", "answer": {"content": "42"}}}
    assert rec.view().result == result and rec.view().attempt == 2
    assert [(a.attempt, a.worker, a.ended) for a in rec.attempts] == [(1, "w0", "lease_expired")]
    assert rec.quarantined and rec.lost_attempts == 1 and rec.worker_attempt == 2


def test_a_queued_hash_leaves_out_what_was_never_written():
    raw = {"request": "{}", "model": "m", "tenant": "t", "status": "queued", "attempt": "1", "seq": "1",
           "created_ms": "7"}  # fmt: skip
    rec = JobRecord.from_hash("job_2", _hash(**raw))
    assert rec.to_hash() == raw
    assert (rec.terminal, rec.result, rec.checkpoint, rec.actions, rec.finished_ms) == (False, None, None, {}, None)
    assert rec.required_action is None and not rec.paused and rec.submitted


def test_a_paused_record_shows_the_calls_still_unanswered():
    actions = {
        c: {"id": c, "name": "f", "arguments": {}, "kind": "client", "where": "client", "answer": a}
        for c, a in (("c1", {"content": "x"}), ("c2", None))
    }
    rec = JobRecord.from_hash(
        "job_3", _hash(status="requires_action", actions=json.dumps(actions), action_deadline_ms="99", request="{}")
    )
    assert rec.paused
    assert rec.required_action is not None
    assert [c.id for c in rec.required_action.calls] == ["c2"] and rec.required_action.deadline_ms == 99


def test_a_remnant_without_its_request_is_not_a_submitted_job():
    rec = JobRecord.from_hash("job_4", _hash(seq="3"))
    assert not rec.submitted
