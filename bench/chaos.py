"""Chaos soak: tool-calling jobs over several worker processes while workers are SIGKILLed and
Redis is restarted, then a check of every job's event stream.

What runs:
- a private redis-server on a free port of 127.0.0.1, in a temporary folder, with the
  append-only file on and ``appendfsync always`` by default: Redis answers a write only once it
  is on disk, so a job whose submission was acknowledged must survive a crash of Redis itself,
  and a job that goes missing is toolq's fault, not the configuration's. With ``everysec`` a
  crash may drop up to a second of acknowledged writes, and "no job lost" would not be a fair
  claim after a SIGKILL of Redis (``--appendfsync everysec --redis-stop term`` is the fair pairing);
- ``--workers`` worker processes with the scripted engine (tests/support/workers.py), serving
  the one tool of tests/support/chaos_tools.py, which counts its executions in Redis;
- jobs submitted at a steady rate through JobStore.submit, each with an idempotency key, so a
  submission that fails while Redis is down is retried without ever making a second job;
- with ``--fair``, instead: two gateway processes in front, and jobs from four tenants in two
  phases (bench/chaos_fair.py): weights 3:1 under saturation, then a flood from tenant A with
  tenant B's probes behind it; the soak then also prints the fairness figures measured from the
  jobs' events, B's wait (in mean job durations, target <= 2) and the start shares' error
  (target within 5 points of 75/25), and fails when a target is missed;
- every ``--kill-every-s`` (jittered) a random worker is SIGKILLed and a new one started;
- once, when half the jobs are submitted, Redis is stopped (SIGKILL by default), left down for
  ``--redis-down-s`` and started again on the same port and folder.

Each job's user message carries a marker of its own; the scripted model answers the first round
with one call of ``chaos_probe(marker)`` and the round after the tool's result with an answer.

When every job has been submitted the kills stop and the soak waits (bounded) for every job to
end. Then it reads each job's stream and prints jobs submitted, jobs ended by terminal type, jobs
lost (no terminal event), jobs whose stream holds other than one terminal event, tools that ran
more than once, seq gaps, the kills and the Redis restart. It exits 1 when any of those four
counts, or the count of jobs created twice, is not 0.

Every process it starts (workers, redis-server) is stopped on the way out, on Ctrl-C too.

Run: .venv/bin/python bench/chaos.py [--jobs 300] [--workers 3] [--kill-every-s 3] [--seed 1]
     .venv/bin/python bench/chaos.py --short      (about 40 jobs, one kill, one Redis restart)
     .venv/bin/python bench/chaos.py --fair [--short]  (1005 jobs, or 303 and 4 kills)
     .venv/bin/python bench/chaos.py --failover [--wait 1|0] [--short]
                                    (a Sentinel failover under load: bench/chaos_failover.py)
     .venv/bin/python bench/chaos.py --effects [--short]
                                    (keyed effects counted by a sink while tools are killed: bench/chaos_effects.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from store.submission import Submission

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bench import chaos_fair
from bench.chaos_fair import FairFigures, FairPlan
from store import keys
from store.jobstore import JobStore
from store.records import JobRecord
from tests.support.chaos_tools import ended, ran_key, runs_key, wait_for_records
from tests.support.gateways import GatewayProcess
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import JobRequest, Message

MODEL = "scripted"
TERMINAL = ("final", "error", "cancelled")
ANSWER = "The probe has answered, so here is the answer to your question, written out at some length."


@dataclass
class Options:
    jobs: int = 300
    workers: int = 3
    kill_every_s: float = 3.0
    seed: int = 1
    max_kills: int | None = None  # None: kill every kill_every_s until every job is submitted
    max_jobs: int = 4  # jobs one worker runs at once
    submit_rate: float = 5.0  # jobs per second
    redis_down_s: float = 2.0
    redis_stop: str = "kill"  # kill (SIGKILL, a crash) or term (a clean shutdown)
    appendfsync: str = "always"
    tool_wait_ms: int = 50  # how long the tool waits after its side effect
    token_delay_s: float = 0.004  # the scripted model's time per token (4 characters)
    submit_retry_s: float = 60.0  # how long one submission is retried before it is given up
    drain_timeout_s: float = 120.0  # how long to wait, after the last submission, for every job to end
    keep_logs: bool = False
    fair: bool = False  # fair share through gateways, in bench/chaos_fair.py's phases
    plan: FairPlan = field(default_factory=FairPlan)  # with fair: the tenants' jobs (jobs is their sum)
    gateways: int = 2  # with fair: gateway processes the jobs are submitted through


def short_options(seed: int = 1, fair: bool = False) -> Options:
    """The quick form for the test suite: 40 jobs, one kill, one Redis restart, well under a minute.
    ``fair``: bench/chaos_fair.py's short plan (303 jobs through 2 gateways), four kills."""
    if fair:
        plan = chaos_fair.short_plan()
        return Options(
            jobs=plan.jobs,
            workers=3,
            kill_every_s=4.0,
            seed=seed,
            max_kills=3,  # on the schedule, mostly in phase 1; one more as the flood goes in
            redis_down_s=1.5,
            drain_timeout_s=90.0,
            submit_retry_s=30.0,
            fair=True,
            plan=plan,
        )
    return Options(
        jobs=40,
        workers=3,
        kill_every_s=2.0,
        seed=seed,
        max_kills=1,
        submit_rate=8.0,
        redis_down_s=1.5,
        drain_timeout_s=45.0,
        submit_retry_s=30.0,
    )


@dataclass
class Report:
    options: Options
    submitted: int = 0
    not_acknowledged: int = 0  # submissions given up after submit_retry_s
    submit_retries: int = 0
    ended: Counter = field(default_factory=Counter)
    error_codes: Counter = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    wrong_terminals: list[str] = field(default_factory=list)
    tools_twice: list[str] = field(default_factory=list)
    seq_gaps: list[str] = field(default_factory=list)
    duplicate_jobs: int = 0
    job_records: int = 0
    resumed: int = 0
    tool_never_ran: int = 0
    tool_failed: int = 0
    kills: list[float] = field(default_factory=list)
    foreign_exits: list[str] = field(default_factory=list)  # worker exits the soak did not cause
    redis_stopped_at: float | None = None
    redis_down_for_s: float | None = None
    redis_start_s: float | None = None  # from starting redis-server to its first PONG
    redis_outage_ms: tuple[int, int] | None = None  # wall clock (ms) of the stop and of the first PONG
    fairness: FairFigures | None = None  # with --fair
    aof_bytes: int = 0
    drained: bool = False
    elapsed_s: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return (
            len(self.lost)
            + len(self.wrong_terminals)
            + len(self.tools_twice)
            + len(self.seq_gaps)
            + self.duplicate_jobs
            + (len(self.fairness.misses()) if self.fairness else 1 if self.options.fair else 0)
        )

    def text(self) -> str:
        o = self.options
        ended = ", ".join(f"{t} {self.ended.get(t, 0)}" for t in TERMINAL)
        if self.error_codes:
            ended += " (" + ", ".join(f"{c} {n}" for c, n in sorted(self.error_codes.items())) + ")"
        if self.redis_stopped_at is None:
            restart = "not restarted"
        else:
            restart = (
                f"{'SIGKILL' if o.redis_stop == 'kill' else 'SIGTERM'} at {self.redis_stopped_at:.1f} s, "
                f"down {self.redis_down_for_s:.2f} s, start to first PONG {self.redis_start_s:.2f} s, "
                f"AOF {self.aof_bytes / 1e6:.1f} MB"
            )
        kills = " ".join(f"{t:.1f}" for t in self.kills)
        lines = [
            f"chaos soak: {o.jobs} jobs, {o.workers} workers (max_jobs {o.max_jobs}), kill every ~{o.kill_every_s:g} s"
            f"{f' (at most {o.max_kills})' if o.max_kills is not None else ''}, seed {o.seed}, "
            f"redis appendfsync {o.appendfsync}, tool wait {o.tool_wait_ms} ms",
            f"jobs submitted               {self.submitted}  (submits retried {self.submit_retries}, "
            f"given up {self.not_acknowledged})",
            f"jobs ended                   {ended}",
            f"jobs lost                    {len(self.lost)}",
            f"jobs with != 1 terminal      {len(self.wrong_terminals)}",
            f"tools executed twice         {len(self.tools_twice)}",
            f"seq gaps                     {len(self.seq_gaps)}",
            f"jobs created twice           {self.duplicate_jobs}  ({self.job_records} job records)",
            f"jobs resumed (attempt > 1)   {self.resumed}",
            f"tool calls that never ran    {self.tool_never_ran}  (tool results not ok: {self.tool_failed})",
            f"worker kills                 {len(self.kills)}  at s: {kills}",
            f"redis restart                {restart}",
            f"worker exits not ours        {len(self.foreign_exits)}",
            f"all jobs ended in time       {'yes' if self.drained else 'NO'}",
            f"elapsed                      {self.elapsed_s:.1f} s",
        ]
        if self.fairness is not None:
            lines += self.fairness.lines()
            lines += [f"  fairness target missed: {m}" for m in self.fairness.misses()]
        lines += self.details + [f"  {x}" for x in self.foreign_exits]
        lines.append("RESULT: " + ("ok" if self.failures == 0 else f"FAILED ({self.failures})"))
        return "\n".join(lines)


def marker_of(seed: int, i: int) -> str:
    return f"cx{seed}n{i:05d}"


def rules_for(markers: list[str], tool_wait_ms: int) -> list[tuple[str, str]]:
    """The scripted model: after a tool result, the answer; before it, the job's one call."""
    rules = [("<tool_response>\\n", ANSWER)]
    for m in markers:
        call = {
            "name": "chaos_probe",
            "arguments": {"marker": m, "wait_ms": tool_wait_ms},
        }
        rules.append((re.escape(f"[{m}]"), f"<tool_call>{json.dumps(call)}</tool_call>"))
    return rules


class Fleet:
    """The worker processes: kill one, replace it, and notice any that exited on their own."""

    def __init__(
        self,
        url: str,
        n: int,
        rules_path: str,
        max_jobs: int,
        report: Report,
        t0: float,
    ):
        self.url, self.rules_path, self.max_jobs = url, rules_path, max_jobs
        self.report, self.t0 = report, t0
        self.procs: list[WorkerProcess] = []
        self.retired: list[WorkerProcess] = []
        self.last_start = [0.0] * n
        for _ in range(n):
            self.procs.append(self._spawn())

    def _spawn(self) -> WorkerProcess:
        return WorkerProcess(
            self.url,
            script=self.rules_path,
            name=MODEL,
            tools=("tests.support.chaos_tools",),
            extra=("--max-jobs", str(self.max_jobs)),
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        for w in self.procs:
            w.wait_ready(timeout)

    def kill_one(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.procs))
        w = self.procs[i]
        w.kill()
        self.report.kills.append(time.monotonic() - self.t0)
        self.retired.append(w)
        self.procs[i] = self._spawn()
        self.last_start[i] = time.monotonic()

    def check(self) -> None:
        """Replace a worker that exited without being killed (at most once a second per slot)."""
        for i, w in enumerate(self.procs):
            if w.proc.poll() is None or time.monotonic() - self.last_start[i] < 1.0:
                continue
            out = w.output().strip().splitlines()
            at = time.monotonic() - self.t0
            self.report.foreign_exits.append(
                f"worker pid {w.proc.pid} exited {w.proc.returncode} at {at:.1f} s: "
                f"{out[-1] if out else '(no output)'}  [log {w.log.name}]"
            )
            self.retired.append(w)
            self.procs[i] = self._spawn()
            self.last_start[i] = time.monotonic()

    def close(self, keep_logs: bool) -> list[str]:
        """Kill what still runs; returns the logs kept (none unless ``keep_logs``)."""
        kept = []
        for w in self.procs + self.retired:
            if w.proc.poll() is None:
                w.kill()
            w.log.close()
            if keep_logs:
                kept.append(w.log.name)
            else:
                Path(w.log.name).unlink(missing_ok=True)
        return kept


def job_request(marker: str) -> JobRequest:
    return JobRequest(
        messages=[
            Message(
                role="user",
                content=f"Chaos job [{marker}]: run the probe, then answer.",
            )
        ],
        tools=["chaos_probe"],
        idempotency_key=marker,
        max_tokens=256,
    )


async def submit_one(store: JobStore, marker: str, opts: Options, report: Report) -> str | None:
    """Submit until acknowledged; the idempotency key makes a retry of a submission that did
    land (its reply lost to the restart) return the same job."""
    deadline = time.monotonic() + opts.submit_retry_s
    while True:
        try:
            job_id, _ = await store.submit(Submission(job_request(marker), model=MODEL))
            return job_id
        except (RedisError, OSError):
            report.submit_retries += 1
            if time.monotonic() > deadline:
                report.not_acknowledged += 1
                return None
            await asyncio.sleep(0.2)


async def submit_all(
    store: JobStore,
    markers: list[str],
    opts: Options,
    report: Report,
    jobs: dict[str, str],
    half: asyncio.Event,
) -> None:
    t0 = time.monotonic()

    async def one(i: int, m: str) -> None:
        await asyncio.sleep(max(0.0, t0 + i / opts.submit_rate - time.monotonic()))
        if i == len(markers) // 2:
            half.set()
        job_id = await submit_one(store, m, opts, report)
        if job_id is not None:
            jobs[m] = job_id

    await asyncio.gather(*(one(i, m) for i, m in enumerate(markers)))
    report.submitted = len(jobs)


async def chaos(
    fleet: Fleet,
    server: RedisServer,
    opts: Options,
    report: Report,
    rng: random.Random,
    half: asyncio.Event,
    calm: asyncio.Event,
    t0: float,
    flood: asyncio.Event | None = None,
) -> None:
    """Kill workers on a jittered schedule until ``calm`` is set, restart Redis once when ``half``
    is set, kill one more worker when ``flood`` is set (--fair: as tenant A's flood goes in, so
    B's probes run on a fleet short of a worker), and replace workers that exited on their own,
    until cancelled."""
    next_kill = time.monotonic() + opts.kill_every_s * rng.uniform(0.5, 1.5)
    restarted = flooded = False
    while True:
        await asyncio.sleep(0.1)
        fleet.check()
        now = time.monotonic()
        may_kill = not calm.is_set() and (opts.max_kills is None or len(report.kills) < opts.max_kills)
        if now >= next_kill and may_kill:
            fleet.kill_one(rng)
            next_kill = now + opts.kill_every_s * rng.uniform(0.5, 1.5)
        if flood is not None and flood.is_set() and not flooded:
            flooded = True
            fleet.kill_one(rng)
        if half.is_set() and not restarted:
            restarted = True
            stopped = time.monotonic()
            stopped_ms = int(time.time() * 1000)
            report.redis_stopped_at = stopped - t0
            server.kill() if opts.redis_stop == "kill" else server.stop()
            await asyncio.sleep(opts.redis_down_s)
            started = time.monotonic()
            await asyncio.to_thread(server.start)  # returns once it answers PING
            report.redis_start_s = time.monotonic() - started
            report.redis_down_for_s = time.monotonic() - stopped
            report.redis_outage_ms = (stopped_ms, int(time.time() * 1000))


async def verify(r: aioredis.Redis, jobs: dict[str, str], report: Report) -> None:
    """Read every job's stream and its tool's execution count."""
    for marker, job_id in sorted(jobs.items()):
        raw = await r.xrange(keys.log(job_id))
        events = [json.loads(fields[b"e"]) for _, fields in raw]
        ids_ok = all(sid.decode() == f"{e['seq']}-0" for (sid, _), e in zip(raw, events, strict=True))
        seqs = [e["seq"] for e in events]
        types = [e["type"] for e in events]
        if seqs != list(range(1, len(seqs) + 1)) or not ids_ok:
            report.seq_gaps.append(job_id)
            report.details.append(f"  seq gap in {job_id}: {seqs}")
        terminals = [e for e in events if e["type"] in TERMINAL]
        if not terminals:
            report.lost.append(job_id)
            rec = JobRecord.from_hash(job_id, await r.hgetall(keys.job(job_id)))
            report.details.append(
                f"  lost {job_id} [{marker}]: status {rec.status.value}, attempt {rec.attempt}, events {types}"
            )
        if len(terminals) != 1 or (terminals and events[-1] is not terminals[0]):
            report.wrong_terminals.append(job_id)
            if terminals:
                report.details.append(f"  {len(terminals)} terminal events in {job_id}: {types}")
        for t in terminals[:1]:
            report.ended[t["type"]] += 1
            if t["type"] == "error":
                report.error_codes[t["data"].get("code", "?")] += 1
        if sum(t == "started" for t in types) > 1:
            report.resumed += 1
        report.tool_failed += sum(1 for e in events if e["type"] == "tool_result" and not e["data"].get("ok"))
        ran = int(await r.get(ran_key(marker)) or 0)
        if ran == 0:
            report.tool_never_ran += 1
        if ran > 1:
            report.tools_twice.append(job_id)
            runs = [x.decode() for x in await r.lrange(runs_key(marker), 0, -1)]
            report.details.append(f"  tool ran {ran} times in {job_id} [{marker}]: {runs}; events {types}")
    records = 0
    async for _ in r.scan_iter(match=keys.JOB_PREFIX + "*", count=1000):
        records += 1
    report.job_records = records
    report.duplicate_jobs = max(0, records - report.submitted)


async def soak(opts: Options, server: RedisServer, report: Report, t0: float) -> None:
    rng = random.Random(opts.seed)
    markers = [marker_of(opts.seed, i) for i in range(opts.jobs)]
    rules_path = write_rules(rules_for(markers, opts.tool_wait_ms), token_delay_s=opts.token_delay_s)
    fleet = Fleet(server.url, opts.workers, rules_path, opts.max_jobs, report, t0)
    store = JobStore.from_url(server.url)
    r = aioredis.Redis.from_url(server.url)
    gateways: list[GatewayProcess] = []
    front: chaos_fair.GatewayFront | None = None
    tenant_of = dict(zip(markers, chaos_fair.tenants_in_order(opts.plan), strict=True)) if opts.fair else {}
    marks: dict[str, tuple[float, float]] = {}
    try:
        fleet.wait_ready()
        if opts.fair:
            gateways = [GatewayProcess(server.url, env=chaos_fair.gateway_env()) for _ in range(opts.gateways)]
            for g in gateways:
                g.wait_ready()
            front = chaos_fair.GatewayFront([g.url for g in gateways], opts.submit_retry_s)
        jobs: dict[str, str] = {}
        half, calm, flood = asyncio.Event(), asyncio.Event(), asyncio.Event()
        chaos_task = asyncio.create_task(
            chaos(fleet, server, opts, report, rng, half, calm, t0, flood if opts.fair else None)
        )
        try:
            if front is not None:
                bodies = [(m, tenant_of[m], job_request(m).model_dump(mode="json", exclude_none=True)) for m in markers]
                await chaos_fair.submit_phases(front, bodies, opts.plan, r, jobs, half, flood, marks, t0)
                report.submitted = len(jobs)
                report.submit_retries, report.not_acknowledged = front.retries, front.given_up
            else:
                await submit_all(store, markers, opts, report, jobs, half)
            calm.set()  # no more kills: let every job end
            report.drained = await wait_for_records(r, list(jobs.values()), "terminal", ended, opts.drain_timeout_s)
        finally:
            chaos_task.cancel()
            await asyncio.gather(chaos_task, return_exceptions=True)
        # a restart still under way when the last job was submitted has finished by now, or failed
        if server.proc is None:
            await asyncio.to_thread(server.start)
        await verify(r, jobs, report)
        if opts.fair:
            report.fairness = await chaos_fair.measure(
                r, opts.plan, jobs, tenant_of, report.redis_outage_ms, report.submit_retries, marks
            )
        report.aof_bytes = await asyncio.to_thread(_aof_bytes, Path(server.dir))
    finally:
        if front is not None:
            await front.close()
        for g in gateways:
            if g.proc.poll() is not None:
                report.foreign_exits.append(f"gateway pid {g.proc.pid} exited {g.proc.returncode}  [log {g.log.name}]")
            g.stop()
            g.log.close()
        await store.close()
        await r.aclose()
        kept = fleet.close(opts.keep_logs or report.failures > 0 or bool(report.foreign_exits))
        if kept:
            report.details.append("  worker logs kept: " + " ".join(kept))
        await asyncio.to_thread(Path(rules_path).unlink, missing_ok=True)


def _aof_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and "appendonly" in p.name)


def run(opts: Options) -> Report:
    """Run the soak and return its report; every process it started is gone when it returns."""
    report = Report(options=opts)
    server = RedisServer(appendfsync=opts.appendfsync)
    t0 = time.monotonic()
    try:
        server.start()
        asyncio.run(soak(opts, server, report, t0))
    finally:
        report.elapsed_s = time.monotonic() - t0
        server.kill()
        if opts.keep_logs or report.failures:
            report.details.append(f"  redis folder kept (AOF): {server.dir}")
        else:
            server.remove()
    return report


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    d = Options()
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"jobs to submit (default {d.jobs}; --short: 40)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=d.workers,
        help=f"worker processes (default {d.workers})",
    )
    p.add_argument(
        "--kill-every-s",
        type=float,
        default=None,
        help=f"mean seconds between worker kills (default {d.kill_every_s:g}; --fair: 8)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="seed of the kill schedule and the job markers",
    )
    p.add_argument(
        "--short",
        action="store_true",
        help="the quick form: 40 jobs, one kill, one Redis restart",
    )
    p.add_argument(
        "--max-jobs",
        type=int,
        default=d.max_jobs,
        help=f"jobs one worker runs at once ({d.max_jobs})",
    )
    p.add_argument(
        "--submit-rate",
        type=float,
        default=None,
        help=f"jobs submitted per second ({d.submit_rate:g})",
    )
    p.add_argument(
        "--redis-down-s",
        type=float,
        default=None,
        help=f"seconds Redis stays down ({d.redis_down_s:g})",
    )
    p.add_argument(
        "--redis-stop",
        choices=["kill", "term"],
        default=d.redis_stop,
        help="how Redis is stopped: kill (SIGKILL, a crash) or term (clean shutdown)",
    )
    p.add_argument(
        "--appendfsync",
        choices=["always", "everysec"],
        default=d.appendfsync,
        help="Redis AOF fsync policy (default always: see the module's docstring)",
    )
    p.add_argument(
        "--tool-wait-ms",
        type=int,
        default=d.tool_wait_ms,
        help=f"the tool's wait after its side effect ({d.tool_wait_ms})",
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=None,
        help=f"wait at most this long for every job to end ({d.drain_timeout_s:g})",
    )
    p.add_argument(
        "--fair",
        action="store_true",
        help="fair share: jobs of four tenants through 2 gateways, and the fairness figures (bench/chaos_fair.py)",
    )
    p.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the worker logs and the Redis folder",
    )
    a = p.parse_args(argv)
    if a.short:
        o = short_options(a.seed, a.fair)
    elif a.fair:
        # through gateways, a submit needs a live worker (503 otherwise): kills every 3 s on a
        # loaded machine, where a worker takes 10-20 s to start, leave none for long stretches
        o = Options(seed=a.seed, fair=True, kill_every_s=8.0, submit_retry_s=180.0, drain_timeout_s=300.0)
    else:
        o = Options(seed=a.seed)
    o.workers, o.max_jobs, o.redis_stop, o.appendfsync = (
        a.workers,
        a.max_jobs,
        a.redis_stop,
        a.appendfsync,
    )
    o.tool_wait_ms, o.keep_logs = a.tool_wait_ms, a.keep_logs
    for name in (
        "jobs",
        "kill_every_s",
        "submit_rate",
        "redis_down_s",
        "drain_timeout_s",
    ):
        if getattr(a, name) is not None:
            setattr(o, name, getattr(a, name))
    if o.fair:
        o.jobs = o.plan.jobs  # the plan decides how many jobs each tenant submits; --jobs does not apply
    if o.jobs < 1 or o.workers < 1 or o.kill_every_s <= 0 or o.submit_rate <= 0:
        p.error("--jobs, --workers, --kill-every-s and --submit-rate must be positive")
    return o


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--effects" in argv:
        from bench import chaos_effects  # its own options and report

        return chaos_effects.main(argv)
    if "--failover" in argv:
        from bench import chaos_failover  # its own options and report

        return chaos_failover.main(argv)
    opts = parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through run()'s cleanup

    signal.signal(signal.SIGTERM, on_term)
    try:
        report = run(opts)
    except KeyboardInterrupt:
        print("interrupted; workers and redis-server stopped", file=sys.stderr)
        return 130
    print(report.text(), flush=True)
    if not report.drained:
        print("not every job ended within --drain-timeout-s", file=sys.stderr)
    return 1 if report.failures else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
