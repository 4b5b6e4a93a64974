"""What a job, its events and a thread cost Redis in memory (docs/operations.md: "Sizing Redis").

Starts a redis-server of its own and a scripted worker (the real worker process, a scripted
engine: tests/support/workers.py), submits jobs through the store as the SDK's Redis mode does
(one tool round each: queued, started, tool_call, tool_result, final) and runs threads of a few
turns, then reads ``MEMORY USAGE`` of each real key and ``INFO memory`` around the whole batch.
Last, what answering a paused job sends to Redis and keeps: a pause of ``--calls`` calls with
2 KB of arguments each, answered one call at a time (``INFO stats`` total_net_input_bytes around
each answer, and the record's ``MEMORY USAGE`` after).

    .venv/bin/python bench/redis_memory.py --jobs 200 --threads 20 --turns 5 [--calls 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

import redis

from store.submission import Submission

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from store import byte_quota, keys
from store.jobstore import JobStore
from store.threads import ThreadStore
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import EventType, JobRequest, JobStatus, Message, PendingAction, now_ms

# one tool round per job: the call, then the answer once the tool's result is in the prompt
CALL = '<tool_call>{"name": "calculate_zorbix", "arguments": {"zorb": 15, "bix": 7}}</tool_call>'
RULES = [("<tool_response>\n", "The answer is 22."), ("", CALL)]
PROMPT = "What is the zorbix of 15 and 7? " + "Some context for the question. " * 20  # about 700 bytes


def usage(r: redis.Redis, key: str) -> int:
    return int(r.memory_usage(key, samples=0) or 0)


async def run(url: str, jobs: int, threads: int, turns: int, calls: int) -> None:
    r = redis.Redis.from_url(url)
    store = JobStore.from_url(url, fair=True)
    model = "scripted"
    before = int(r.info("memory")["used_memory"])
    ids = []
    for _ in range(jobs):
        job_id, _ = await store.submit(
            Submission(
                JobRequest(messages=[Message(role="user", content=PROMPT)], tools=["calculate_zorbix"]), model=model
            )
        )
        ids.append(job_id)
    for job_id in ids:
        async for ev in store.follow(job_id):
            if ev is not None and ev.terminal:
                break
    after_jobs = int(r.info("memory")["used_memory"])
    record = [usage(r, keys.job(j)) for j in ids]
    log = [usage(r, keys.log(j)) for j in ids]
    events = [r.xlen(keys.log(j)) for j in ids]
    print(f"jobs: {jobs}, events per job {statistics.median(events):.0f} (one tool round)")
    print(
        f"  record (hash) median {statistics.median(record):,.0f} B; event log (stream) {statistics.median(log):,.0f} B"
    )
    print(f"  used_memory per job, all keys (record, log, arq result, indexes): {(after_jobs - before) / jobs:,.0f} B")
    print(f"  per event: {statistics.median(log) / statistics.median(events):,.0f} B")
    counted = await byte_quota.held(store.redis, "default")
    print(f"  counted against its tenant's quota (store/byte_quota.py): {counted['job'] / jobs:,.0f} B a job")

    ts = ThreadStore(store)
    tids = []
    for _ in range(threads):
        t = await ts.create("bench", ttl_s=3600)
        tids.append(t.id)
        for turn in range(turns):
            placed = await ts.run(
                "bench",
                t.id,
                JobRequest(messages=[Message(role="user", content=f"turn {turn}: {PROMPT}")]),
                model=model,
            )
            async for ev in store.follow(placed.job_id):
                if ev is not None and ev.terminal:
                    break
    msgs = [r.llen(keys.thread_messages(t)) for t in tids]
    tmem = [usage(r, keys.thread(t)) + usage(r, keys.thread_messages(t)) + usage(r, keys.thread_ids(t)) for t in tids]
    per_msg = statistics.median(tmem) / statistics.median(msgs)
    print(f"threads: {threads} of {turns} runs, {statistics.median(msgs):.0f} messages each")
    print(f"  thread keys (hash, messages, ids) median {statistics.median(tmem):,.0f} B, {per_msg:,.0f} B per message")
    print("  (each run is also a job: its record and log as above, until they expire)")
    await ts.add_messages("bench", tids[0], [Message(role="user", content="fold")])  # counts the last run's output
    counted = await byte_quota.held(store.redis, "bench")
    runs = threads * turns
    print(
        f"  counted against its tenant's quota: {counted['thread'] / sum(msgs):,.0f} B a thread message, "
        f"{counted['job'] / runs:,.0f} B a run's record (its input twice and the history it copies)"
    )
    await answers(store, r, calls)
    await store.close()
    r.close()


async def answers(store: JobStore, r: redis.Redis, calls: int) -> None:
    """Bytes sent to Redis by each answer to a paused job of ``calls`` calls, and its record's size."""
    job_id, _ = await store.submit(
        Submission(JobRequest(messages=[Message(role="user", content=PROMPT)]), model="paused")
    )
    await store.emit(job_id, EventType.started, {}, attempt=1, status=JobStatus.running, lease_ms=60_000)
    pending = [
        PendingAction(id=f"call_{i}", name="lookup", arguments={"q": "x" * 2_000}, kind="client", where="client")
        for i in range(calls)
    ]
    await store.pause(job_id, attempt=1, pending=pending, deadline_ms=now_ms() + 600_000, checkpoint={})
    sent = []
    for p in pending:
        before = int(r.info("stats")["total_net_input_bytes"])
        await store.answer_actions(job_id, [(p.id, {"content": "a short answer"})], "client")
        sent.append(int(r.info("stats")["total_net_input_bytes"]) - before)
    print(f"answers: a pause of {calls} calls with 2 KB of arguments each, answered one call at a time")
    rest = sent[1:]  # the first call also loads the script into Redis's cache
    print(
        f"  sent to Redis per answer: median {statistics.median(rest):,.0f} B, most {max(rest):,} B, "
        f"the last (it resumes the job) {sent[-1]:,} B"
    )
    print(f"  the record after the last answer: {usage(r, keys.job(job_id)):,} B")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=20)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    server = RedisServer()
    server.start()
    worker = None
    try:
        url = server.url + "/0"
        worker = WorkerProcess(url, script=write_rules(RULES)).wait_ready()
        asyncio.run(run(url, a.jobs, a.threads, a.turns, a.calls))
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
        server.remove()


if __name__ == "__main__":
    main()
