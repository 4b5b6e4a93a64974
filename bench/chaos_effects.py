"""The effects soak (``bench/chaos.py --effects``): every tool call sends one keyed effect to a sink
in another process while the processes running the tools are SIGKILLed in the middle of them; the
sink then says whether each effect happened once.

What runs, all real processes on loopback (a private redis-server with ``appendfsync always``):
- the sink (tests/support/effect_sink.py), an HTTP server that counts effects per effect key;
- ``--workers`` workers with the scripted engine and the tools of tests/support/effect_tools.py,
  and two tool service processes serving tests/support/effect_service_tools.py;
- each job's one turn calls three tools at once, each sending an effect keyed with its call's
  effect key and then holding ``--hold-ms``: ``effect_here`` in the worker, ``effect_journaled`` in
  the worker through the effect journal (``current_call().once``), ``effect_there`` in a tool
  service.

Every ``--kill-every-s`` (jittered) the worker that sent the latest effect is SIGKILLed (so it is
in the middle of a tool, or just past one) and a new one started; every ``--service-kill-every-s``
the same for a tool service instance. A killed worker's job is taken over by another attempt,
which runs the started-but-unanswered calls again under the same keys (the tools are declared
idempotent); a killed service's call is delivered to the other instance under the same call id.

Then the soak reads every job's events and the sink's counts, and prints: effects expected (one
per call announced), what the deduplicating sink holds (distinct keys), the keys missing and the
keys nobody announced (a call made again under a new key: a duplicate), what a sink that does
not deduplicate would have received (per tool), jobs lost, jobs with other than one terminal
event, and jobs whose events are out of order (a seq gap). It exits 1 unless missing, unexpected,
lost, terminal and order failures are all 0.

The full soak runs on a Sentinel-watched Redis (a primary, a replica, three sentinels) with
``TOOLQ_REDIS_WAIT_REPLICAS=1``, and once half the jobs are in, the primary is SIGKILLed with
its replica half a second behind (bench/chaos_failover.py's sequence); ``--no-failover`` or the
short form use one redis-server.

Run: .venv/bin/python bench/chaos.py --effects [--jobs 60] [--short] [--no-failover]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store.submission import Submission

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from redis.exceptions import RedisError

from store import keys, redis_urls
from store.durability import NotReplicated
from store.jobstore import JobStore
from tests.support.chaos_tools import ended, wait_for_records
from tests.support.effect_sink import SINK_ENV, counts
from tests.support.redis_server import RedisServer
from tests.support.sentinel_set import SentinelSet
from tests.support.services import ServiceProcess
from tests.support.workers import WorkerProcess, write_rules
from toolq.wire.protocol import JobRequest, Message

MODEL = "scripted"
TERMINAL = ("final", "error", "cancelled")
TOOLS = ("effect_here", "effect_journaled", "effect_there")
ANSWER = "Every effect was sent, so here is the answer."


@dataclass
class EffectOptions:
    jobs: int = 60
    workers: int = 3
    services: int = 2
    kill_every_s: float = 3.0
    service_kill_every_s: float = 5.0
    hold_ms: int = 600  # each tool's hold after its effect: the window a kill lands in
    submit_rate: float = 3.0
    max_jobs: int = 4
    seed: int = 1
    drain_timeout_s: float = 180.0
    # a Sentinel primary failover (bench/chaos_failover.py's sequence) with WAIT on, once half the
    # jobs are in; the lease then outlasts the failover, so a killed worker's job waits it out too
    failover: bool = False
    lease_ms: int = 1500


def short_effect_options(seed: int = 1) -> EffectOptions:
    """The quick form for the suite: 12 jobs, a kill of each kind or two."""
    return EffectOptions(
        jobs=12, kill_every_s=2.5, service_kill_every_s=3.0, submit_rate=3.0, seed=seed, drain_timeout_s=90.0
    )


def full_effect_options(seed: int = 1) -> EffectOptions:
    """The full soak: 60 jobs, kills of both kinds, and a primary failover with WAIT on."""
    return EffectOptions(seed=seed, failover=True, lease_ms=10_000, drain_timeout_s=300.0)


@dataclass
class EffectReport:
    options: EffectOptions
    submitted: int = 0
    expected: set[str] = field(default_factory=set)  # one key per announced call
    per_key: dict[str, int] = field(default_factory=dict)  # the sink's deliveries by key
    raw_by_tool: Counter = field(default_factory=Counter)  # deliveries (no dedup) by tool
    calls_by_tool: Counter = field(default_factory=Counter)
    tool_of: dict[str, str] = field(default_factory=dict)  # effect key -> the tool its call named
    lost: list[str] = field(default_factory=list)
    wrong_terminals: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    reruns: int = 0  # tool results of a call run again after a lost attempt
    unknown: int = 0  # tool results whose outcome was left unknown
    not_ok: int = 0
    resumed: int = 0
    unannounced: int = 0  # calls answered with no tool_call event before them
    worker_kills: list[float] = field(default_factory=list)
    failover_at_s: float | None = None
    promoted_after_s: float | None = None
    service_kills: list[float] = field(default_factory=list)
    drained: bool = False
    elapsed_s: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def missing(self) -> set[str]:
        return self.expected - set(self.per_key)

    @property
    def unexpected(self) -> set[str]:
        return set(self.per_key) - self.expected

    @property
    def raw(self) -> int:
        return sum(self.per_key.values())

    @property
    def failures(self) -> int:
        return (
            len(self.missing)
            + len(self.unexpected)
            + len(self.lost)
            + len(self.wrong_terminals)
            + len(self.out_of_order)
            + (0 if self.submitted == self.options.jobs else 1)
        )

    def text(self) -> str:
        o = self.options
        per_tool = ", ".join(
            f"{t} {self.raw_by_tool.get(t, 0)} for {self.calls_by_tool.get(t, 0)} calls" for t in TOOLS
        )
        lines = [
            f"effects soak: {o.jobs} jobs x {len(TOOLS)} calls, {o.workers} workers, {o.services} tool services, "
            f"worker kill every ~{o.kill_every_s:g} s, service kill every ~{o.service_kill_every_s:g} s, "
            f"hold {o.hold_ms} ms, seed {o.seed}",
            f"jobs submitted                   {self.submitted}",
            f"effects expected (calls)         {len(self.expected)}  (one per call answered)",
            f"keyed sink: effects              {len(set(self.per_key))}  "
            f"(missing {len(self.missing)}, duplicated under a new key {len(self.unexpected)})",
            f"non-deduplicating sink received  {self.raw}  ({self.raw - len(self.per_key)} more than once)",
            f"  by tool                        {per_tool}",
            f"calls run again under their key  {self.reruns}  (outcome left unknown: {self.unknown}, "
            f"results not ok: {self.not_ok})",
            f"jobs lost                        {len(self.lost)}",
            f"jobs with != 1 terminal          {len(self.wrong_terminals)}",
            f"jobs with events out of order    {len(self.out_of_order)}",
            f"jobs resumed (attempt > 1)       {self.resumed}  (calls answered, never announced: {self.unannounced})",
            f"worker kills                     {len(self.worker_kills)}  at s: "
            + " ".join(f"{t:.1f}" for t in self.worker_kills),
            f"service kills                    {len(self.service_kills)}  at s: "
            + " ".join(f"{t:.1f}" for t in self.service_kills),
            "redis failover                   "
            + (
                f"primary SIGKILLed at {self.failover_at_s:.1f} s, promoted after {self.promoted_after_s:.1f} s, WAIT 1"
                if self.failover_at_s is not None and self.promoted_after_s is not None
                else "none"
            ),
            f"all jobs ended in time           {'yes' if self.drained else 'NO'}",
            f"elapsed                          {self.elapsed_s:.1f} s",
            *self.details,
            "RESULT: " + ("ok" if self.failures == 0 else f"FAILED ({self.failures})"),
        ]
        return "\n".join(lines)


def _marker(seed: int, i: int) -> str:
    return f"fx{seed}n{i:05d}"


def _rules(markers: list[str], hold_ms: int) -> list[tuple[str, str]]:
    rules = [("<tool_response>\\n", ANSWER)]
    for m in markers:
        calls = "".join(
            f"<tool_call>{json.dumps({'name': t, 'arguments': {'marker': m, 'hold_ms': hold_ms}})}</tool_call>"
            for t in TOOLS
        )
        rules.append((re.escape(f"[{m}]"), calls))
    return rules


def _request(marker: str) -> JobRequest:
    return JobRequest(
        messages=[Message(role="user", content=f"Effects job [{marker}]: send every effect, then answer.")],
        tools=list(TOOLS),
        idempotency_key=marker,
        max_tokens=512,
    )


class _Procs:
    """Workers and tool services: kill the one that sent the latest effect, start a new one."""

    def __init__(self, url: str, sink_url: str, rules_path: str, opts: EffectOptions):
        self.url, self.sink_url, self.rules_path, self.opts = url, sink_url, rules_path, opts
        self.env = {SINK_ENV: sink_url, "TOOLQ_LEASE_MS": str(opts.lease_ms)}
        if opts.failover:
            self.env |= {"TOOLQ_REDIS_WAIT_REPLICAS": "1", "TOOLQ_REDIS_WAIT_TIMEOUT_MS": "500"}
        self.workers = [self._worker() for _ in range(opts.workers)]
        self.services = [self._service() for _ in range(opts.services)]
        self.retired: list[WorkerProcess | ServiceProcess] = []

    def _worker(self) -> WorkerProcess:
        return WorkerProcess(
            self.url,
            script=self.rules_path,
            name=MODEL,
            tools=("tests.support.effect_tools",),
            extra=("--max-jobs", str(self.opts.max_jobs)),
            env=self.env,
        )

    def _service(self) -> ServiceProcess:
        return ServiceProcess(self.url, ("tests.support.effect_service_tools",), lease_ms=1000, env=self.env)

    def wait_ready(self) -> None:
        for p in [*self.workers, *self.services]:
            p.wait_ready(120.0)

    def kill_latest(self, kind: str, rng: random.Random) -> None:
        """SIGKILL the process of ``kind`` that sent the latest effect (a random one if none did)."""
        procs: list = self.workers if kind == "worker" else self.services
        tools = ("effect_there",) if kind == "service" else ("effect_here", "effect_journaled")
        recent = [pid for tool, pid, _ in counts(self.sink_url)["recent"] if tool in tools]
        pids = [p.proc.pid for p in procs]
        i = next((pids.index(pid) for pid in reversed(recent) if pid in pids), rng.randrange(len(procs)))
        procs[i].kill()
        self.retired.append(procs[i])
        procs[i] = self._worker() if kind == "worker" else self._service()

    def close(self) -> None:
        for p in [*self.workers, *self.services, *self.retired]:
            if p.proc.poll() is None:
                p.kill()
            p.log.close()
            Path(p.log.name).unlink(missing_ok=True)


async def _submit(store: JobStore, markers: list[str], rate: float, jobs: dict[str, str], half: asyncio.Event) -> None:
    t0 = time.monotonic()

    async def one(i: int, m: str) -> None:
        await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        if i == len(markers) // 2:
            half.set()
        for _ in range(100):
            try:
                jobs[m], _ = await store.submit(Submission(_request(m), model=MODEL))
                return
            except (RedisError, OSError, NotReplicated):
                await asyncio.sleep(0.2)

    await asyncio.gather(*(one(i, m) for i, m in enumerate(markers)))


async def _chaos(
    procs: _Procs, opts: EffectOptions, report: EffectReport, rng: random.Random, t0: float, both: asyncio.Event
) -> None:
    next_worker = time.monotonic() + opts.kill_every_s * rng.uniform(0.5, 1.5)
    next_service = time.monotonic() + opts.service_kill_every_s * rng.uniform(0.5, 1.5)
    while True:
        await asyncio.sleep(0.05)
        now = time.monotonic()
        if now >= next_worker:
            await asyncio.to_thread(procs.kill_latest, "worker", rng)
            report.worker_kills.append(now - t0)
            next_worker = now + opts.kill_every_s * rng.uniform(0.5, 1.5)
        if now >= next_service:
            await asyncio.to_thread(procs.kill_latest, "service", rng)
            report.service_kills.append(now - t0)
            next_service = now + opts.service_kill_every_s * rng.uniform(0.5, 1.5)
        if report.worker_kills and report.service_kills:
            both.set()


async def _verify(r: Any, jobs: dict[str, str], report: EffectReport) -> None:
    for marker, job_id in sorted(jobs.items()):
        raw = await r.xrange(keys.log(job_id))
        events = [json.loads(f[b"e"]) for _, f in raw]
        seqs = [e["seq"] for e in events]
        in_order = all(sid.decode() == f"{e['seq']}-0" for (sid, _), e in zip(raw, events, strict=True))
        if seqs != list(range(1, len(seqs) + 1)) or not in_order:
            report.out_of_order.append(job_id)
            report.details.append(f"  events out of order in {job_id}: {seqs}")
        types = [e["type"] for e in events]
        terminals = [e for e in events if e["type"] in TERMINAL]
        if not terminals:
            report.lost.append(job_id)
            report.details.append(f"  lost {job_id} [{marker}]: events {types}")
        if len(terminals) != 1 or (terminals and events[-1] is not terminals[0]):
            report.wrong_terminals.append(job_id)
        if sum(t == "started" for t in types) > 1:
            report.resumed += 1
        announced = set()
        for e in events:
            d = e["data"]
            if e["type"] == "tool_call":
                announced.add(d.get("effect_key"))
            if e["type"] == "tool_result" and d.get("effect_key"):
                # every call of the conversation gets one result; its announcement may be missing
                # (an attempt killed between a turn's tool_call events: the next runs the rest)
                report.expected.add(d["effect_key"])
                report.tool_of[d["effect_key"]] = d["name"]
                report.calls_by_tool[d["name"]] += 1
                report.unannounced += d["effect_key"] not in announced
            if e["type"] == "tool_result":
                report.reruns += bool(d.get("rerun"))
                report.unknown += bool(d.get("outcome_unknown"))
                report.not_ok += not d.get("ok")


async def _failover(cluster: SentinelSet, half: asyncio.Event, report: EffectReport, t0: float) -> None:
    """Once half the jobs are in: the replica stalls half a second (so the primary's last writes
    are nowhere else), the primary is SIGKILLed, the sentinels promote the replica, and the old
    primary comes back as a replica (bench/chaos_failover.py's sequence)."""
    await half.wait()
    replica = cluster.replica()
    replica.proc.send_signal(signal.SIGSTOP)
    await asyncio.sleep(0.5)
    old = await asyncio.to_thread(cluster.kill_primary)
    replica.proc.send_signal(signal.SIGCONT)
    killed = time.monotonic()
    report.failover_at_s = killed - t0
    new_port = await asyncio.to_thread(cluster.wait_promoted, old.port)
    report.promoted_after_s = time.monotonic() - killed
    await asyncio.to_thread(cluster.wait_agreed, new_port)
    await asyncio.sleep(2.0)
    await asyncio.to_thread(cluster.restart, old)
    await asyncio.to_thread(cluster.wait_replicas, new_port, 1, 60.0)


async def _soak(
    opts: EffectOptions, url: str, cluster: SentinelSet | None, sink_url: str, report: EffectReport, t0: float
) -> None:
    rng = random.Random(opts.seed)
    markers = [_marker(opts.seed, i) for i in range(opts.jobs)]
    rules_path = write_rules(_rules(markers, opts.hold_ms), token_delay_s=0.002)
    procs = _Procs(url, sink_url, rules_path, opts)
    store = JobStore.from_url(url)
    r = redis_urls.async_client(url)
    failover: asyncio.Task[None] | None = None
    try:
        await asyncio.to_thread(procs.wait_ready)
        jobs: dict[str, str] = {}
        both_killed = asyncio.Event()  # set once a worker and a service have been killed
        chaos = asyncio.create_task(_chaos(procs, opts, report, rng, t0, both_killed))
        half = asyncio.Event()
        if cluster is not None:
            failover = asyncio.create_task(_failover(cluster, half, report, t0))
        try:
            await _submit(store, markers, opts.submit_rate, jobs, half)
            report.submitted = len(jobs)
            # the kills go on until the last job is in and each kind has had one; then every job ends
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(both_killed.wait(), 20.0)
        finally:
            chaos.cancel()
            await asyncio.gather(chaos, return_exceptions=True)
        if failover is not None:
            await failover  # the old primary is back as a replica before the jobs are read
        report.drained = await wait_for_records(r, list(jobs.values()), "terminal", ended, opts.drain_timeout_s)
        await _verify(r, jobs, report)
        report.per_key = counts(sink_url)["per_key"]
        for key, n in report.per_key.items():
            report.raw_by_tool[report.tool_of.get(key, "?")] += n
    finally:
        if failover is not None:
            failover.cancel()
            await asyncio.gather(failover, return_exceptions=True)
        await store.close()
        await r.aclose()
        procs.close()
        await asyncio.to_thread(Path(rules_path).unlink, missing_ok=True)


def run_effects(opts: EffectOptions) -> EffectReport:
    report = EffectReport(options=opts)
    server = None if opts.failover else RedisServer(appendfsync="always")
    cluster = SentinelSet(down_after_ms=1000) if opts.failover else None
    sink = subprocess.Popen(
        [sys.executable, "-m", "tests.support.effect_sink"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    t0 = time.monotonic()
    try:
        assert sink.stdout is not None
        sink_url = f"http://127.0.0.1:{int(sink.stdout.readline())}"
        if server is not None:
            server.start()
        if cluster is not None:
            cluster.start()
        url = server.url if server is not None else cluster.url  # type: ignore[union-attr]
        asyncio.run(_soak(opts, url, cluster, sink_url, report, t0))
    finally:
        report.elapsed_s = time.monotonic() - t0
        sink.kill()
        sink.wait()
        if server is not None:
            server.kill()
            server.remove()
        if cluster is not None:
            cluster.stop()
    return report


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--effects", action="store_true", help="(chosen by bench/chaos.py)")
    p.add_argument("--short", action="store_true", help="the quick form of the suite")
    d = EffectOptions()
    p.add_argument("--jobs", type=int, default=None, help=f"jobs ({d.jobs})")
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--kill-every-s", type=float, default=None)
    p.add_argument("--service-kill-every-s", type=float, default=None)
    p.add_argument("--hold-ms", type=int, default=d.hold_ms)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-failover", action="store_true", help="the full soak without the Redis failover")
    a = p.parse_args(argv)
    o = short_effect_options(a.seed) if a.short else full_effect_options(a.seed)
    if a.no_failover:
        o.failover, o.lease_ms = False, EffectOptions().lease_ms
    o.workers, o.hold_ms = a.workers, a.hold_ms
    for name in ("jobs", "kill_every_s", "service_kill_every_s"):
        if getattr(a, name) is not None:
            setattr(o, name, getattr(a, name))
    report = run_effects(o)
    print(report.text(), flush=True)
    return 1 if report.failures else 0
