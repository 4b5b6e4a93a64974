"""Every Redis key and channel name toolq uses, in one place.

A job's own keys carry the hash tag ``{job_id}``, so a job's hash and stream share a slot.
"""

from __future__ import annotations

PREFIX = "toolq"

# Pub/sub: every event of every job, and every event of one job.
EVENTS_ALL = f"{PREFIX}:events"
# Nobody publishes here: it keeps the event hub's pub/sub connection subscribed while it follows no
# job, so redis-py never reads a health-check reply beside the hub's reader (store/event_hub.py).
HUB_IDLE = f"{PREFIX}:hub"


def events_channel(job_id: str) -> str:
    return f"{PREFIX}:events:{job_id}"


def log(job_id: str) -> str:
    """Stream of the job's events (stream id ``<seq>-0``), replayable from any seq."""
    return f"{PREFIX}:log:{{{job_id}}}"


JOB_PREFIX = f"{PREFIX}:job:"  # the submit and claim scripts build job keys from it


def job(job_id: str) -> str:
    """Hash: the job record (request, status, tenant, model, attempt, seq, result, checkpoint)."""
    return f"{JOB_PREFIX}{{{job_id}}}"


def cancel(job_id: str) -> str:
    """Set when a job is to be cancelled; the worker checks it between tokens and iterations."""
    return f"{PREFIX}:cancel:{{{job_id}}}"


def queue(model: str) -> str:
    """The arq queue of one model (a sorted set that arq owns: store/arq_link.py)."""
    return f"{PREFIX}:queue:{model}"


def wake(model: str) -> str:
    """List pushed on every enqueue so idle workers wake at once instead of waiting a poll."""
    return f"{PREFIX}:wake:{model}"


WAKE_BACKLOG = 64  # wake tokens a wake list keeps: more than enough to wake every idle worker


def spare_wake(model: str) -> str:
    """The wake list of batch lines (spare jobs): read only by workers with a free engine slot,
    since a line takes nothing else (store/lua/dispatch.lua)."""
    return f"{PREFIX}:wake-spare:{model}"


# Sorted set: running job id -> lease deadline (unix ms). An expired lease means a lost worker.
LEASES = f"{PREFIX}:leases"


# Hash: model -> jobs quarantined after too many lost attempts (store/lua/claim.lua); a
# counter that /metrics and the dashboard read.
QUARANTINED = f"{PREFIX}:quarantined"


# Sorted set: paused job id -> action deadline (unix ms); store/pauses.py ends the overdue ones.
PAUSED = f"{PREFIX}:paused"


def response(tenant: str, response_id: str) -> str:
    """Hash: a Responses-API response of one tenant (its job id and request); expires with the job's TTL."""
    return f"{PREFIX}:response:{tenant}:{response_id}"


def idempotency(tenant: str, key: str) -> str:
    return f"{PREFIX}:idem:{tenant}:{key}"


# The fleet: one hash per live worker, expiring unless its heartbeat refreshes it.
WORKERS = f"{PREFIX}:workers"  # set of worker ids (members whose key expired are stale)
WORKER_PREFIX = f"{PREFIX}:worker:"  # dispatch.lua builds a worker's key from it


def worker(worker_id: str) -> str:
    return f"{WORKER_PREFIX}{worker_id}"


def health(worker_id: str) -> str:
    """arq's health check of one worker, refreshed every few seconds while it runs."""
    return f"{PREFIX}:health:{worker_id}"


# Tool services (toolq/services/): one expiring hash per live instance, as for workers.
SERVICES = f"{PREFIX}:services"  # set of instance ids (members whose key expired are stale)


def service(instance_id: str) -> str:
    return f"{PREFIX}:service:{instance_id}"


# A tool's calls, its results and the caller's wake-up share the hash tag ``{tool}``, so the
# result script (store/lua/service_result.lua) touches keys of one slot.
SERVICE_GROUP = "toolq-services"  # the consumer group every instance of a tool reads its stream in


def tool_calls(tool: str) -> str:
    """Stream of calls to one service tool; each instance is a consumer of ``SERVICE_GROUP``."""
    return f"{PREFIX}:calls:{{{tool}}}"


def tool_result(tool: str, call_id: str) -> str:
    """The accepted result of one call (set once: the call id is the idempotency key)."""
    return f"{PREFIX}:result:{{{tool}}}:{call_id}"


def effect(key: str) -> str:
    """Hash: the journal's record of one effect, by its effect key (toolq/tools/journal.py)."""
    return f"{PREFIX}:effect:{key}"


def tool_reply(tool: str, call_id: str) -> str:
    """List the caller BLPOPs for the result of one call."""
    return f"{PREFIX}:reply:{{{tool}}}:{call_id}"


# Fair share (store/fair.py): which job of a model's queue starts next. The backlog waits in
# one sorted set per tenant and model; a worker with a free slot asks store/lua/dispatch.lua
# for the next fair job, which puts it on the model's arq queue. store/lua/lib/fair_keys.lua
# spells the per-tenant names the same way for the scripts that build them from a tenant.
FAIR_PREFIX = f"{PREFIX}:fair:"
RUNNING_PREFIX = f"{PREFIX}:running:"


def fair_tenants(model: str) -> str:
    """Sorted set: tenant with jobs waiting -> its pass (the virtual time of its next start)."""
    return f"{FAIR_PREFIX}{model}:tenants"


def fair_passes(model: str) -> str:
    """Hash: tenant -> the pass it left with when its waiting set emptied."""
    return f"{FAIR_PREFIX}{model}:passes"


def fair_vtime(model: str) -> str:
    """The model's virtual time: the pass of the latest start."""
    return f"{FAIR_PREFIX}{model}:vtime"


def fair_seq(model: str) -> str:
    """Counter: the arrival order of waiting jobs (first in, first out within a priority)."""
    return f"{FAIR_PREFIX}{model}:seq"


def fair_waiting(model: str, tenant: str) -> str:
    """Sorted set: a tenant's waiting jobs of one model, best first (priority, then arrival)."""
    return f"{FAIR_PREFIX}{model}:waiting:{tenant}"


def tenant_running(tenant: str) -> str:
    """Sorted set: a tenant's jobs handed to the queue and not yet ended or paused -> start ms."""
    return f"{RUNNING_PREFIX}{tenant}"


# Hashes: tenant -> weight, tenant -> most jobs running at once (written with each submit from
# the gateway's configuration, read by dispatch.lua).
TENANT_WEIGHTS = f"{PREFIX}:tenant-weights"
TENANT_CAPS = f"{PREFIX}:tenant-caps"
TENANT_STARTED = f"{PREFIX}:tenant-started"  # hash: tenant -> jobs dispatch.lua handed to a queue

USAGE_PREFIX = f"{PREFIX}:usage:"
# Counters: the tokens a tenant's unfinished jobs hold against one budget window (store/budget_holds.py)
BUDGET_HELD_PREFIX = f"{PREFIX}:budget-held:"

# Hash per tenant: the bytes it keeps in Redis, per item and in all (store/byte_quota.py,
# store/lua/lib/tenant_bytes.lua); beside it ``<key>:due``, when to look at each item again.
TENANT_BYTES_PREFIX = f"{PREFIX}:bytes:"


def tenant_bytes(tenant: str) -> str:
    return f"{TENANT_BYTES_PREFIX}{tenant}"


# Affinity (store/affinity.py): which conversations each worker holds, and a job's offer to
# the worker that holds its prefix before any other (store/lua/dispatch.lua).
HELD_PREFIX = f"{PREFIX}:held:"


def held(worker_id: str) -> str:
    """Set: the conversation-prefix keys (store/conversation_keys.py) a worker holds; it
    expires with the worker's registry entry and is refreshed by its heartbeat."""
    return f"{HELD_PREFIX}{worker_id}"


def worker_load(model: str) -> str:
    """Hash: worker id -> "<jobs running> <most jobs>", written as each job starts and ends, so
    dispatch.lua sees a full worker at once (the registry entry is only as fresh as a heartbeat)."""
    return f"{PREFIX}:load:{model}"


def worker_wake(model: str, worker_id: str) -> str:
    """List that wakes one worker: pushed when a job is offered to it first."""
    return f"{PREFIX}:wake:{model}:{worker_id}"


def affinity_reserved(model: str) -> str:
    """Hash: arq id -> "<worker> <until ms>" of the model's jobs dispatch.lua just placed by affinity,
    each its worker's alone on arq's queue until then (read and pruned by arq_start.lua)."""
    return f"{PREFIX}:reserved:{model}"


def affinity_counts(model: str) -> str:
    """Hash: how dispatch.lua placed the model's jobs that had a preferred worker -> count
    (``affinity``, ``fallback_wait``, ``fallback_gone``, ``fallback_full``)."""
    return f"{PREFIX}:affinity:{model}"


def usage_total(tenant: str) -> str:
    """Hash: a tenant's token use since the start (prompt, completion, tokens, jobs)."""
    return f"{USAGE_PREFIX}{tenant}"


def usage_window(tenant: str, window: str, index: int) -> str:
    """Counter: a tenant's tokens in one window (``minute`` or ``day``, numbered from the epoch)."""
    return f"{USAGE_PREFIX}{tenant}:{window}:{index}"


def budget_held(tenant: str, window: str, index: int) -> str:
    """Counter: the tokens a tenant's unfinished jobs reserved in one window (store/lua/lib/budget.lua)."""
    return f"{BUDGET_HELD_PREFIX}{tenant}:{window}:{index}"


# Webhook deliveries (store/deliveries.py). emit.lua and pause.lua record a delivery in the
# same step as the event it reports; the `toolq webhooks` process sends it.
# Sorted set: delivery id -> when it is next due (ms, Redis's clock); for a claimed one, its lease's end.
WEBHOOK_DUE = f"{PREFIX}:webhooks:due"
WEBHOOK_WAKE = f"{PREFIX}:webhooks:wake"  # list pushed with every new delivery, so the sender wakes at once


DELIVERY_PREFIX = f"{PREFIX}:webhook:"  # the claim script builds delivery keys from it


def delivery(delivery_id: str) -> str:
    """Hash: one delivery (job, tenant, url, type, the event it reports, status, attempts, times)."""
    return f"{DELIVERY_PREFIX}{{{delivery_id}}}"


def delivery_attempts(delivery_id: str) -> str:
    """List of one delivery's attempts (JSON each: when, status code or error, duration)."""
    return f"{PREFIX}:webhook:attempts:{{{delivery_id}}}"


def job_deliveries(job_id: str) -> str:
    """List of the delivery ids of one job, oldest first: the job's delivery log."""
    return f"{PREFIX}:webhooks:job:{{{job_id}}}"


def dead_deliveries(tenant: str) -> str:
    """Sorted set: the tenant's deliveries that never succeeded (the dead-letter list) -> when they gave up."""
    return f"{PREFIX}:webhooks:dead:{tenant}"


# Threads (store/threads.py): a conversation kept on the server. A thread's keys share the
# hash tag ``{thread_id}``. The scripts that end a run (store/lua/lib/thread_end.lua, included by
# emit.lua) build them from THREAD_PREFIX and the thread id the run's record names.
THREAD_PREFIX = f"{PREFIX}:thread:"


def thread(thread_id: str) -> str:
    """Hash: tenant, metadata, TTL, created_ms, the active run (``active``), an arrival counter."""
    return f"{THREAD_PREFIX}{{{thread_id}}}"


def thread_messages(thread_id: str) -> str:
    """List: the thread's messages, one Message JSON per element, oldest first."""
    return f"{thread(thread_id)}:messages"


def thread_ids(thread_id: str) -> str:
    """List: the id of each message, aligned with ``thread_messages`` (conversation item ids)."""
    return f"{thread(thread_id)}:ids"


def thread_waiting(thread_id: str) -> str:
    """Sorted set: runs waiting for the active one to end, scored by their turn."""
    return f"{thread(thread_id)}:waiting"


def thread_runs(thread_id: str) -> str:
    """List: the ids of the thread's runs, oldest first (a rolled-back run is taken out)."""
    return f"{thread(thread_id)}:runs"


def threads(tenant: str) -> str:
    """Sorted set: a tenant's thread ids by creation time (members whose thread expired are stale)."""
    return f"{PREFIX}:threads:{tenant}"


CANCEL_PREFIX = f"{PREFIX}:cancel:"  # thread_run.lua builds a run's cancel key from it: see cancel()


# The recent-jobs indexes the dashboard lists (store/job_index.py), written with each new
# job by submit.lua and thread_run.lua (lua/lib/job_index.lua): job id -> submit time (ms).
JOBS_ALL = f"{PREFIX}:index:jobs"


def tenant_jobs(tenant: str) -> str:
    """Sorted set: a tenant's newest jobs by submit time (members whose record expired are stale)."""
    return f"{JOBS_ALL}:{tenant}"


def proven_keys(address: str) -> str:
    """Set: digests of the keys that were right from one client address, which its wrong-key lock
    does not stop (gateway/wrong_keys.py); expires a day after the last write."""
    return f"{PREFIX}:proven-keys:{address}"


def wrong_keys(address: str) -> str:
    """Counter: wrong keys presented from one client address in its current window; it expires
    with the window (wrong_key.lua, gateway/wrong_keys.py)."""
    return f"{PREFIX}:wrong-keys:{address}"
