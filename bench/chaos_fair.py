"""The fair-share form of the chaos soak (bench/chaos.py --fair): its tenants, its two phases,
and the fairness figures measured from the jobs' own events while the soak's kills go on.

Jobs go in over HTTP through two gateway processes (alternately), each tenant with its own API
key, with the weights in the gateways' ``TOOLQ_TENANTS``:

1. **Weights.** ``heavy`` (weight 3) and ``light`` (weight 1) submit their backlogs together
   (interleaved 3 to 1); Redis is restarted when half of them are in. The figure: the tenants'
   shares of the turns given (dispatch.lua's choices, the record's ``placed_ms``) while both
   still had jobs waiting for one, against 75/25 (target within 5 points).
2. **Flood.** Once phase 1's jobs have all started, a worker is killed and ``flood`` (tenant A)
   submits its flood, then ``probe`` (tenant B) submits one job every ``probe_every_s`` while the
   flood still waits (and the killed worker's replacement starts). The figure: each probe's wait
   (its ``queued`` to its first ``started`` event) in mean job durations (a job's first
   ``started`` to its ``final``, over the jobs that ran once), target at most 2, with how many
   flood jobs were still waiting when it was submitted.

A submission is retried (same idempotency key, so never a second job) on a connection error or a
5xx, as a client of a gateway whose Redis is restarting must.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis.asyncio as aioredis

from store import keys
from tests.support.chaos_tools import wait_for_records

HEAVY, LIGHT, FLOOD, PROBE = "heavy", "light", "flood", "probe"
WEIGHTS = {HEAVY: 3, LIGHT: 1, FLOOD: 1, PROBE: 1}
SHARE_TARGET = WEIGHTS[HEAVY] / (WEIGHTS[HEAVY] + WEIGHTS[LIGHT])  # 0.75
SHARE_TOLERANCE = 0.05
WAIT_TARGET = 2.0  # B's wait, in mean job durations
SUBMIT_CONCURRENCY = 16


@dataclass
class FairPlan:
    heavy: int = 360  # both backlogs outlast the first 400 starts
    light: int = 140
    flood: int = 500
    probes: int = 5
    probe_every_s: float = 1.5

    @property
    def jobs(self) -> int:
        return self.heavy + self.light + self.flood + self.probes


def short_plan() -> FairPlan:
    return FairPlan(heavy=105, light=45, flood=150, probes=3, probe_every_s=0.8)


def api_key(tenant: str) -> str:
    return f"chaos-key-{tenant}"


def gateway_env() -> dict[str, str]:
    return {
        "TOOLQ_API_KEYS": json.dumps({api_key(t): t for t in WEIGHTS}),
        "TOOLQ_TENANTS": json.dumps({t: {"weight": w} for t, w in WEIGHTS.items()}),
        "TOOLQ_MAX_QUEUE_DEPTH": "1000000",
        "TOOLQ_FAIR_SHARE": "true",
    }


def tenants_in_order(plan: FairPlan) -> list[str]:
    """Every job's tenant, in the order they are submitted: phase 1 interleaved by weight
    (heavy, heavy, heavy, light, ...), then the flood, then the probes."""
    phase1 = sorted(
        [(i / plan.heavy, HEAVY) for i in range(plan.heavy)] + [(i / plan.light, LIGHT) for i in range(plan.light)]
    )
    return [t for _, t in phase1] + [FLOOD] * plan.flood + [PROBE] * plan.probes


@dataclass
class FairFigures:
    plan: FairPlan
    share_window: int = 0  # turns given while heavy and light both had jobs waiting
    share_counts: Counter = field(default_factory=Counter)
    mean_job_ms: float = 0.0
    probe_waits_ms: list[float] = field(default_factory=list)
    flood_waiting_at_probe: list[int] = field(default_factory=list)
    probes_over_outage: int = 0  # probes whose wait spans the Redis restart (none by design)
    submit_retries: int = 0
    marks: dict[str, tuple[float, float]] = field(default_factory=dict)  # submit_phases' steps

    @property
    def heavy_share(self) -> float:
        return self.share_counts[HEAVY] / self.share_window if self.share_window else 0.0

    @property
    def share_error(self) -> float:
        return self.heavy_share - SHARE_TARGET

    @property
    def waits_in_durations(self) -> list[float]:
        return [w / self.mean_job_ms for w in self.probe_waits_ms] if self.mean_job_ms else []

    def misses(self) -> list[str]:
        """The fairness targets not met (empty: all met)."""
        out = []
        if self.share_window < min(self.plan.heavy, 100) or abs(self.share_error) > SHARE_TOLERANCE:
            out.append(f"share of heavy {self.heavy_share:.3f} over {self.share_window} turns, target 0.75 +- 0.05")
        waits = self.waits_in_durations
        if len(waits) != self.plan.probes or max(waits, default=0.0) > WAIT_TARGET:
            out.append(f"B's waits {[round(w, 2) for w in waits]} mean job durations, target <= {WAIT_TARGET:g}")
        if any(n == 0 for n in self.flood_waiting_at_probe):
            out.append("a probe was submitted when none of the flood was waiting: it measured nothing")
        return out

    def lines(self) -> list[str]:
        p = self.plan
        c = self.share_counts
        waits = ", ".join(f"{w:.0f}" for w in self.probe_waits_ms)
        in_d = ", ".join(f"{w:.2f}" for w in self.waits_in_durations)
        return [
            f"fair share: tenants heavy {p.heavy} jobs (weight 3), light {p.light} (weight 1), then flood (A) "
            f"{p.flood}, probe (B) {p.probes}; through 2 gateways (submits retried {self.submit_retries})",
            f"share under weights 3:1     heavy {c[HEAVY]} light {c[LIGHT]} of {self.share_window} turns given "
            f"while both waited: heavy {self.heavy_share * 100:.1f}% (target 75 +- 5), error "
            f"{self.share_error * 100:+.1f} points",
            f"B's wait behind A's flood   {waits} ms = {in_d} mean job durations (mean job {self.mean_job_ms:.0f} ms);"
            f" worst {max(self.waits_in_durations, default=float('nan')):.2f} (target <= {WAIT_TARGET:g})",
            f"A's jobs waiting at each B  {', '.join(str(n) for n in self.flood_waiting_at_probe)}"
            + (
                f"  ({self.probes_over_outage} probe(s) waited across the Redis restart)"
                if self.probes_over_outage
                else ""
            ),
            "phases (s)                  " + ", ".join(f"{k} {a:.1f}-{b:.1f}" for k, (a, b) in self.marks.items()),
        ]


class GatewayFront:
    """Submissions over HTTP, alternating between the gateways, retried until acknowledged."""

    def __init__(self, urls: list[str], retry_s: float):
        self.clients = [httpx.AsyncClient(base_url=u, timeout=10.0) for u in urls]
        self.retry_s = retry_s
        self.retries = 0
        self.given_up = 0
        self._n = 0

    async def close(self) -> None:
        for c in self.clients:
            await c.aclose()

    async def submit(self, body: dict[str, Any], tenant: str) -> str | None:
        deadline = time.monotonic() + self.retry_s
        self._n += 1
        i = self._n
        while True:
            client = self.clients[i % len(self.clients)]
            try:
                r = await client.post("/v1/jobs", json=body, headers={"X-API-Key": api_key(tenant)})
                if r.status_code in (200, 201, 202):
                    return str(r.json()["job_id"])
                if r.status_code < 500:
                    raise RuntimeError(f"submission refused: {r.status_code} {r.text}")
            except httpx.HTTPError:
                pass
            self.retries += 1
            if time.monotonic() > deadline:
                self.given_up += 1
                return None
            i += 1  # the other gateway next
            await asyncio.sleep(0.2)


async def submit_phases(
    front: GatewayFront,
    bodies: list[tuple[str, str, dict[str, Any]]],  # (marker, tenant, request JSON), in tenants_in_order
    plan: FairPlan,
    r: aioredis.Redis,
    jobs: dict[str, str],
    half: asyncio.Event,
    flood: asyncio.Event,
    marks: dict[str, tuple[float, float]],
    t0: float,
) -> None:
    """Phase 1, its drain (bounded), then the flood (``flood`` set as it starts: a worker is killed
    then) and the probes; ``marks`` gets each step's
    (start, end) in seconds from ``t0``, to set beside the kills' times."""
    sem = asyncio.Semaphore(SUBMIT_CONCURRENCY)
    n1 = plan.heavy + plan.light
    done1 = 0

    async def one(marker: str, tenant: str, body: dict[str, Any]) -> None:
        nonlocal done1
        async with sem:
            job_id = await front.submit(body, tenant)
        if job_id is not None:
            jobs[marker] = job_id
        if tenant in (HEAVY, LIGHT):
            done1 += 1
            if done1 == n1 // 2:
                half.set()  # Redis is restarted with phase 1 half in

    def since() -> float:
        return time.monotonic() - t0

    a = since()
    await asyncio.gather(*(one(*b) for b in bodies[:n1]))
    marks["weights submitted"] = (a, since())
    phase1 = [jobs[m] for m, _, _ in bodies[:n1] if m in jobs]
    a = since()
    await wait_for_records(r, phase1, "status", lambda s: s not in (None, b"queued"), 120.0, every_s=0.2)
    marks["weights started"] = (a, since())
    a = since()
    flood.set()
    await asyncio.gather(*(one(*b) for b in bodies[n1 : n1 + plan.flood]))
    marks["flood submitted"] = (a, since())
    a = since()
    for b in bodies[n1 + plan.flood :]:
        await asyncio.sleep(plan.probe_every_s)
        await one(*b)
    marks["probes submitted"] = (a, since())


async def first_times(r: aioredis.Redis, job_id: str) -> dict[str, Any]:
    """The job's first queued / started / final timestamps (ms) and how many times it started."""
    out: dict[str, Any] = {"starts": 0}
    for _, f in await r.xrange(keys.log(job_id)):
        ev = json.loads(f[b"e"])
        out.setdefault(ev["type"], ev["ts"])
        out["starts"] += ev["type"] == "started"
    return out


async def measure(
    r: aioredis.Redis,
    plan: FairPlan,
    jobs: dict[str, str],
    tenant_of: dict[str, str],
    outage_ms: tuple[int, int] | None,
    submit_retries: int,
    marks: dict[str, tuple[float, float]],
) -> FairFigures:
    fig = FairFigures(plan, submit_retries=submit_retries, marks=marks)
    t: dict[str, dict[str, Any]] = {}
    for marker, job_id in jobs.items():
        t[marker] = await first_times(r, job_id)
    durations = [x["final"] - x["started"] for x in t.values() if x["starts"] == 1 and "final" in x]
    fig.mean_job_ms = statistics.mean(durations) if durations else 0.0

    # Shares: walk phase 1's turns in order (when dispatch.lua chose each job, Redis's clock, on
    # this one machine the clock of the events too); a turn counts while both tenants have a job
    # submitted and not yet chosen (the one chosen included). Turns, not starts: a job chosen
    # and then lost with the worker that took it starts only once it is released
    # (unstall.lua, seconds later), and would count the other tenant's turns meanwhile as
    # made while both waited, though the scheduler had given its tenant that turn.
    events: list[tuple[int, int, str]] = []  # (ts, 0 queued / 1 turn, tenant)
    for m, x in t.items():
        if tenant_of[m] in (HEAVY, LIGHT) and "queued" in x:
            events.append((x["queued"], 0, tenant_of[m]))
            turn = await r.hget(keys.job(jobs[m]), "placed_ms")
            if turn:
                events.append((int(turn), 1, tenant_of[m]))
    waiting: Counter = Counter()
    for _, kind, tenant in sorted(events):
        if kind == 0:
            waiting[tenant] += 1
            continue
        if waiting[HEAVY] > 0 and waiting[LIGHT] > 0:
            fig.share_window += 1
            fig.share_counts[tenant] += 1
        waiting[tenant] -= 1

    flood = [x for m, x in t.items() if tenant_of[m] == FLOOD]
    probes = sorted((x for m, x in t.items() if tenant_of[m] == PROBE), key=lambda x: x.get("queued", 0))
    for x in probes:
        if "queued" not in x or "started" not in x:
            continue
        q, s = x["queued"], x["started"]
        fig.probe_waits_ms.append(float(s - q))
        fig.flood_waiting_at_probe.append(
            sum(1 for f in flood if f.get("queued", q + 1) <= q < f.get("started", q + 1))
        )
        if outage_ms is not None and q <= outage_ms[1] and s >= outage_ms[0]:
            fig.probes_over_outage += 1
    return fig
