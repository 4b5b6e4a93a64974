"""The failover soak (``bench/chaos.py --failover``): tool-calling jobs through two gateways and
three workers on a Sentinel-watched Redis while its primary is SIGKILLed.

What runs, all real processes on free loopback ports (tests/support/sentinel_set.py):
- a Redis primary, one replica and three sentinels (quorum 2, down after ``down_after_ms``);
- three workers with the scripted engine and the tool of tests/support/chaos_tools.py, which
  writes each of its runs to a file outside Redis (a count in Redis could be lost with the primary);
- two gateways; every process is given ``redis+sentinel://...`` and nothing else.

Jobs are posted at a steady rate to the gateways in turn, each with an Idempotency-Key: a post
answered otherwise than 202/200 (a 503 while no primary is known or WAIT came back short, a
dropped connection) is posted again with the same key, so a retry never makes a second job. A
job is *acknowledged* once a gateway answered it 202 (or 200, a retry that found its job).

When half the jobs are posted, the replica is stopped (SIGSTOP, as a stalled link) for
``replica_lag_s``, so that the primary's last writes are nowhere else, and the primary is
SIGKILLed; the replica is let go and the sentinels promote it. Once every sentinel names the new
primary (a sentinel still behind would send clients to the returning machine) and two seconds
later, the old primary is started again, empty, and the sentinels make it a replica of the new one.

Then every acknowledged job's stream is read from the primary of now, and the soak prints: jobs
acknowledged and lost (no record, or never ended), jobs with other than one terminal event, tools
executed twice, seq gaps, and the time from the kill to the first job that finished after it.
With ``TOOLQ_REDIS_WAIT_REPLICAS`` on (``--wait 1``, the default) the first four must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.exceptions import RedisError

from store import arq_link, keys, redis_urls
from tests.support.chaos_tools import RUNS_DIR_ENV, ended, wait_for_records
from tests.support.gateways import GatewayProcess
from tests.support.processes import ToolqProcess
from tests.support.sentinel_set import SentinelSet
from tests.support.workers import WorkerProcess, write_rules

MODEL = "scripted"
TERMINAL = ("final", "error", "cancelled")


@dataclass
class FailoverOptions:
    jobs: int = 300
    workers: int = 3
    gateways: int = 2
    wait_replicas: int = 1  # TOOLQ_REDIS_WAIT_REPLICAS for every process; 0 turns WAIT off
    wait_timeout_ms: int = 500
    submit_rate: float = 10.0  # jobs per second, over all gateways
    down_after_ms: int = 1000  # the sentinels' down-after-milliseconds
    rejoin_after_s: float = 2.0  # from the promotion to the old primary's restart
    replica_lag_s: float = 0.5  # the replica is stopped this long before the primary is killed
    max_jobs: int = 4
    lease_ms: int = 10_000
    tool_wait_ms: int = 50
    token_delay_s: float = 0.004
    submit_retry_s: float = 60.0
    drain_timeout_s: float = 120.0
    seed: int = 1
    keep_logs: bool = False


def short_failover_options(wait_replicas: int = 1) -> FailoverOptions:
    """The quick form for the test suite: 80 jobs, one failover, well under two minutes."""
    return FailoverOptions(jobs=80, submit_rate=10.0, wait_replicas=wait_replicas, drain_timeout_s=90.0)


@dataclass
class FailoverReport:
    options: FailoverOptions
    acknowledged: int = 0
    not_acknowledged: int = 0  # given up after submit_retry_s
    submit_retries: int = 0
    not_replicated_503: int = 0
    lost: list[str] = field(default_factory=list)  # acknowledged, and no record or no terminal event
    wrong_terminals: list[str] = field(default_factory=list)
    tools_twice: list[str] = field(default_factory=list)
    seq_gaps: list[str] = field(default_factory=list)
    tool_never_ran: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    killed_at_s: float | None = None
    promoted_after_s: float | None = None
    rejoined_after_s: float | None = None  # from the kill to the old primary in sync as a replica
    first_finished_after_s: float | None = None
    drained: bool = False
    elapsed_s: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return len(self.lost) + len(self.wrong_terminals) + len(self.tools_twice) + len(self.seq_gaps)

    def text(self) -> str:
        o = self.options

        def s(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.2f} s"

        ended = ", ".join(f"{t} {self.ended.get(t, 0)}" for t in TERMINAL)
        lines = [
            f"failover soak: {o.jobs} jobs, {o.workers} workers, {o.gateways} gateways, "
            f"WAIT {f'on ({o.wait_replicas} replica, {o.wait_timeout_ms} ms)' if o.wait_replicas else 'off'}, "
            f"sentinel down-after {o.down_after_ms} ms, replica {o.replica_lag_s:g} s behind at the kill",
            f"jobs acknowledged              {self.acknowledged}  (posts retried {self.submit_retries}, "
            f"503 not_replicated {self.not_replicated_503}, given up {self.not_acknowledged})",
            f"jobs ended                     {ended}",
            f"jobs acknowledged and lost     {len(self.lost)}",
            f"jobs with != 1 terminal        {len(self.wrong_terminals)}",
            f"tools executed twice           {len(self.tools_twice)}",
            f"seq gaps                       {len(self.seq_gaps)}",
            f"tool calls that never ran      {self.tool_never_ran}",
            f"primary SIGKILLed at           {s(self.killed_at_s)}",
            f"replica promoted after         {s(self.promoted_after_s)}",
            f"old primary back as replica    {s(self.rejoined_after_s)} after the kill",
            f"kill to first job finished     {s(self.first_finished_after_s)}",
            f"all jobs ended in time         {'yes' if self.drained else 'NO'}",
            f"elapsed                        {self.elapsed_s:.1f} s",
        ]
        lines += self.details
        lines.append("RESULT: " + ("ok" if self.failures == 0 else f"FAILED ({self.failures})"))
        return "\n".join(lines)


def _marker(seed: int, i: int) -> str:
    return f"fo{seed}n{i:05d}"


def _rules(markers: list[str], tool_wait_ms: int) -> list[tuple[str, str]]:
    rules = [("<tool_response>\\n", "The probe answered; here is the answer.")]
    for m in markers:
        call = {"name": "chaos_probe", "arguments": {"marker": m, "wait_ms": tool_wait_ms}}
        rules.append((f"\\[{m}\\]", f"<tool_call>{json.dumps(call)}</tool_call>"))
    return rules


def _body(marker: str) -> dict:
    return {
        "messages": [{"role": "user", "content": f"Failover job [{marker}]: run the probe, then answer."}],
        "tools": ["chaos_probe"],
        "max_tokens": 256,
    }


async def _post(
    http: httpx.AsyncClient, gateways: list[str], i: int, marker: str, opts: FailoverOptions, report: FailoverReport
) -> str | None:
    deadline = time.monotonic() + opts.submit_retry_s
    tries = 0
    while True:
        url = gateways[(i + tries) % len(gateways)]  # a retry goes to the other gateway
        tries += 1
        try:
            r = await http.post(url + "/v1/jobs", json=_body(marker), headers={"Idempotency-Key": marker})
            if r.status_code in (200, 201, 202):
                return str(r.json()["job_id"])
            if r.status_code == 503 and r.json().get("error", {}).get("code") == "not_replicated":
                report.not_replicated_503 += 1
        except (httpx.HTTPError, ValueError):
            pass
        report.submit_retries += 1
        if time.monotonic() > deadline:
            report.not_acknowledged += 1
            return None
        await asyncio.sleep(0.2)


async def _terminal(r: Any, job_ids: list[str]) -> set[str]:
    """The jobs among ``job_ids`` that have ended."""
    async with r.pipeline(transaction=False) as pipe:
        for j in job_ids:
            pipe.hget(keys.job(j), "terminal")
        flags = await pipe.execute()
    return {j for j, f in zip(job_ids, flags, strict=True) if f == b"1"}


async def _first_finished(url: str, jobs: dict[str, str], ended_before: set[str], killed: float) -> float:
    """Seconds from the kill until a job that had not ended at the kill is seen ended (polled
    every 50 ms through the sentinels, so on whichever primary is current)."""
    r = redis_urls.async_client(url, socket_timeout=2, socket_connect_timeout=0.5)
    try:
        while True:
            try:
                if await _terminal(r, [j for j in list(jobs.values()) if j not in ended_before]):
                    return time.monotonic() - killed
            except (RedisError, OSError):
                pass  # no primary yet
            await asyncio.sleep(0.05)
    finally:
        await r.aclose()


async def _chaos(
    cluster: SentinelSet,
    half: asyncio.Event,
    jobs: dict[str, str],
    report: FailoverReport,
    opts: FailoverOptions,
    t0: float,
) -> None:
    """Kill the primary once half the jobs are posted, wait for the promotion, bring the old
    primary back, and time the first job that finishes after the kill."""
    await half.wait()
    r = redis_urls.async_client(cluster.url)
    try:
        ended_before = await _terminal(r, list(jobs.values()))
    finally:
        await r.aclose()
    replica = cluster.replica()
    if opts.replica_lag_s > 0:
        # the replica falls behind (SIGSTOP: as a stalled link or machine), so the primary's last
        # writes exist nowhere else when it dies: what asynchronous replication risks
        replica.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(opts.replica_lag_s)
    old = await asyncio.to_thread(cluster.kill_primary)
    if opts.replica_lag_s > 0:
        replica.proc.send_signal(signal.SIGCONT)
    killed = time.monotonic()
    report.killed_at_s = killed - t0
    first = asyncio.create_task(_first_finished(cluster.url, jobs, ended_before, killed))
    try:
        new_port = await asyncio.to_thread(cluster.wait_promoted, old.port)
        report.promoted_after_s = time.monotonic() - killed
        await asyncio.to_thread(cluster.wait_agreed, new_port)  # then the old machine comes back
        await asyncio.sleep(opts.rejoin_after_s)
        await asyncio.to_thread(cluster.restart, old)
        await asyncio.to_thread(cluster.wait_replicas, new_port, 1, 60.0)
        report.rejoined_after_s = time.monotonic() - killed
        report.first_finished_after_s = await asyncio.wait_for(first, opts.drain_timeout_s)
    finally:
        first.cancel()


async def _wait_ended(url: str, job_ids: list[str], timeout: float) -> bool:
    r = redis_urls.async_client(url)
    try:
        return await wait_for_records(r, job_ids, "terminal", ended, timeout)
    finally:
        await r.aclose()


async def _where_it_is(r: Any, job_id: str, rec: dict[str, str]) -> str:
    """Every place a queued job may wait or be held, for a lost job's line in the report."""
    tenant = rec.get("tenant", "default")
    arq_id = f"{job_id}:{rec.get('attempt', 1)}"
    places = {
        "arq queue": await r.zscore(keys.queue(MODEL), arq_id),
        "fair waiting": await r.zscore(keys.fair_waiting(MODEL, tenant), job_id),
        "running": await r.zscore(keys.tenant_running(tenant), job_id),
        "lease": await r.zscore(keys.LEASES, job_id),
        "arq job key": await r.exists(arq_link.JOB_KEY_PREFIX + arq_id),
        "in progress": await r.pttl(arq_link.IN_PROGRESS_KEY_PREFIX + arq_id),
        "tenant in fair set": await r.zscore(keys.fair_tenants(MODEL), tenant),
    }
    return "    " + ", ".join(f"{k} {v!r}" for k, v in places.items())


async def _verify(url: str, jobs: dict[str, str], runs_dir: Path, report: FailoverReport) -> None:
    r = redis_urls.async_client(url)
    try:
        for marker, job_id in sorted(jobs.items()):
            raw = await r.xrange(keys.log(job_id))
            events = [json.loads(f[b"e"]) for _, f in raw]
            seqs = [e["seq"] for e in events]
            types = [e["type"] for e in events]
            ids_ok = all(sid.decode() == f"{e['seq']}-0" for (sid, _), e in zip(raw, events, strict=True))
            if seqs != list(range(1, len(seqs) + 1)) or not ids_ok:
                report.seq_gaps.append(job_id)
                report.details.append(f"  seq gap in {job_id}: {seqs}")
            terminals = [e for e in events if e["type"] in TERMINAL]
            if not terminals:
                report.lost.append(job_id)
                rec = {k.decode(): v.decode()[:40] for k, v in (await r.hgetall(keys.job(job_id))).items()}
                where = {k: rec.get(k) for k in ("status", "attempt", "tenant")} if rec else "GONE"
                report.details.append(f"  lost {job_id} [{marker}]: record {where}, events {types}")
                report.details.append(await _where_it_is(r, job_id, rec))
            elif len(terminals) != 1 or events[-1] is not terminals[0]:
                report.wrong_terminals.append(job_id)
                report.details.append(f"  {len(terminals)} terminal events in {job_id}: {types}")
            for t in terminals[:1]:
                report.ended[t["type"]] = report.ended.get(t["type"], 0) + 1
                if t["type"] == "error":
                    report.details.append(f"  error in {job_id}: {t['data'].get('code')}: {t['data'].get('message')}")
            f = runs_dir / marker
            runs = f.read_text().splitlines() if f.exists() else []
            if not runs:
                report.tool_never_ran += 1
            if len(runs) > 1:
                report.tools_twice.append(job_id)
                report.details.append(f"  tool ran {len(runs)} times in {job_id} [{marker}]: {runs}; events {types}")
    finally:
        await r.aclose()


async def _soak(opts: FailoverOptions, cluster: SentinelSet, report: FailoverReport, runs_dir: Path, t0: float) -> None:
    markers = [_marker(opts.seed, i) for i in range(opts.jobs)]
    rules_path = write_rules(_rules(markers, opts.tool_wait_ms), token_delay_s=opts.token_delay_s)
    url = cluster.url
    env = {
        "TOOLQ_REDIS_WAIT_REPLICAS": str(opts.wait_replicas),
        "TOOLQ_REDIS_WAIT_TIMEOUT_MS": str(opts.wait_timeout_ms),
        RUNS_DIR_ENV: str(runs_dir),
        # a lease must outlast the failover (down-after plus the election), or every running job
        # is taken over by another worker while its own still runs it
        "TOOLQ_LEASE_MS": str(opts.lease_ms),
    }
    procs: list[ToolqProcess] = []
    try:
        workers = [
            WorkerProcess(
                url,
                script=rules_path,
                name=MODEL,
                tools=("tests.support.chaos_tools",),
                extra=("--max-jobs", str(opts.max_jobs)),
                env=env,
            )
            for _ in range(opts.workers)
        ]
        procs += workers
        gateways = [GatewayProcess(url, env=env) for _ in range(opts.gateways)]
        procs += gateways
        for w in workers:
            await asyncio.to_thread(w.wait_ready, 120.0)
        for g in gateways:
            await asyncio.to_thread(g.wait_ready)
        jobs: dict[str, str] = {}
        half = asyncio.Event()
        chaos = asyncio.create_task(_chaos(cluster, half, jobs, report, opts, t0))
        start = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as http:

            async def one(i: int, m: str) -> None:
                await asyncio.sleep(max(0.0, start + i / opts.submit_rate - time.monotonic()))
                if i == len(markers) // 2:
                    half.set()
                job_id = await _post(http, [g.url for g in gateways], i, m, opts, report)
                if job_id is not None:
                    jobs[m] = job_id

            await asyncio.gather(*(one(i, m) for i, m in enumerate(markers)))
        report.acknowledged = len(jobs)
        await chaos
        report.drained = await _wait_ended(url, list(jobs.values()), opts.drain_timeout_s)
        await _verify(url, jobs, runs_dir, report)
        for p in procs:
            if p.proc.poll() is not None:
                report.details.append(f"  {p.what} pid {p.proc.pid} exited {p.proc.returncode} [log {p.log.name}]")
    finally:
        keep = opts.keep_logs or report.failures > 0
        for p in procs:
            p.stop(10)
            p.log.close()
            if keep:
                report.details.append(f"  {p.what} log kept: {p.log.name}")
            else:
                await asyncio.to_thread(Path(p.log.name).unlink, missing_ok=True)
        await asyncio.to_thread(Path(rules_path).unlink, missing_ok=True)


def run_failover(opts: FailoverOptions) -> FailoverReport:
    """Run the failover soak; every process it started is gone when it returns."""
    report = FailoverReport(options=opts)
    cluster = SentinelSet(down_after_ms=opts.down_after_ms)
    runs_dir = Path(tempfile.mkdtemp(prefix="toolq-chaos-runs-"))
    t0 = time.monotonic()
    try:
        cluster.start()
        asyncio.run(_soak(opts, cluster, report, runs_dir, t0))
    finally:
        report.elapsed_s = time.monotonic() - t0
        cluster.stop()
        for f in runs_dir.iterdir():
            f.unlink()
        runs_dir.rmdir()
    return report


def main(argv: list[str]) -> int:
    """``bench/chaos.py --failover [options]``."""
    d = FailoverOptions()
    p = argparse.ArgumentParser(prog="chaos.py --failover", description=__doc__.split("\n\n")[0])
    p.add_argument("--failover", action="store_true", required=True)
    p.add_argument("--short", action="store_true", help="the quick form: 80 jobs")
    p.add_argument("--jobs", type=int, default=None, help=f"jobs to post (default {d.jobs}; --short: 80)")
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--gateways", type=int, default=d.gateways)
    p.add_argument("--wait", type=int, default=d.wait_replicas, help="TOOLQ_REDIS_WAIT_REPLICAS (0: WAIT off)")
    p.add_argument("--wait-timeout-ms", type=int, default=d.wait_timeout_ms, help="TOOLQ_REDIS_WAIT_TIMEOUT_MS")
    p.add_argument("--submit-rate", type=float, default=d.submit_rate, help="jobs posted per second")
    p.add_argument(
        "--replica-lag-s", type=float, default=d.replica_lag_s, help="the replica is frozen this long before the kill"
    )
    p.add_argument("--down-after-ms", type=int, default=d.down_after_ms, help="the sentinels' down-after-milliseconds")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--keep-logs", action="store_true")
    a = p.parse_args(argv)
    opts = short_failover_options() if a.short else FailoverOptions()
    opts.wait_replicas, opts.wait_timeout_ms, opts.submit_rate = a.wait, a.wait_timeout_ms, a.submit_rate
    opts.workers, opts.gateways, opts.seed, opts.keep_logs = a.workers, a.gateways, a.seed, a.keep_logs
    opts.down_after_ms, opts.replica_lag_s = a.down_after_ms, a.replica_lag_s
    if a.jobs is not None:
        opts.jobs = a.jobs
    if opts.jobs < 1 or opts.workers < 1 or opts.gateways < 1 or opts.wait_replicas < 0:
        p.error("--jobs, --workers and --gateways must be positive, --wait at least 0")
    report = run_failover(opts)
    print(report.text(), flush=True)
    return 1 if report.failures else 0
