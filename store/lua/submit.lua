-- A whole submission in one step: idempotency, the queue-depth limit, the job record, its
-- `queued` event (seq 1), the arq job and a wake token for an idle worker. This script is the
-- only place that reads or writes idempotency keys.
--
-- A key that names a job which still exists hands that job back before anything else is looked
-- at: retrying a submit that went through is always safe. A key whose job has expired is taken
-- over by the new job.
--
-- With fair share on (`fair` '1') the job waits in its tenant's set (fair_enqueue.lua) with its
-- arq job stored but not queued; store/lua/dispatch.lua queues it when its turn comes. The
-- queue bounds (admit.lua: the tenant's own cap, its share of a full queue, the model's ceiling)
-- count the waiting jobs of every tenant as well as arq's queue. The tenant's token budgets are
-- charged in the same step (budget.lua): the job reserves its token ceiling, so parallel submits
-- never reserve past the budget.
--
-- With fair share on and a `prefer`red worker (the live worker that holds the longest prefix of
-- the job's conversation, store/affinity.py), the job is offered to that worker first
-- (affinity_prefer.lua); dispatch.lua keeps the others off it for `prefer_wait_ms`.
--
-- include: wake_push.lua
-- include: now.lua
-- include: arq_enqueue.lua
-- include: fair_keys.lua
-- include: fair_enqueue.lua
-- include: admit.lua
-- include: job_index.lua
-- include: affinity_prefer.lua
-- include: budget.lua
-- include: tenant_bytes.lua
--
-- KEYS[1] job                the new job's record (hash)
-- KEYS[2] log                the new job's event stream
-- KEYS[3] job_channel        pub/sub channel of the new job's events
-- KEYS[4] all_channel        pub/sub channel of every job's events
-- KEYS[5] idempotency        the tenant's idempotency key (unused when idempotency_ttl_s is '')
-- KEYS[6] arq_job            the arq job key
-- KEYS[7] arq_result         the arq result key
-- KEYS[8] queue              the model's queue (arq's sorted set)
-- KEYS[9] wake               the model's wake list
-- KEYS[10] tenants           the model's active tenants (sorted set: tenant -> pass)
-- KEYS[11] passes            the model's saved passes of idle tenants (hash)
-- KEYS[12] vtime             the model's virtual time
-- KEYS[13] waiting           the tenant's waiting set for the model
-- KEYS[14] seq_key           the model's arrival counter
-- KEYS[15] weights           tenant -> weight (hash)
-- KEYS[16] caps              tenant -> most jobs running at once (hash)
-- KEYS[17] tenant_jobs       the tenant's recent jobs (sorted set: job id -> submit ms; job_index.lua)
-- KEYS[18] all_jobs          every tenant's recent jobs (the same)
-- KEYS[19] spare_wake        the model's wake list of batch lines, read by workers with a free slot
-- ARGV[1] job_id             the new job's id
-- ARGV[2] request            the request JSON
-- ARGV[3] model              the model; '' only hands back the job the key names
-- ARGV[4] tenant             the caller's tenant
-- ARGV[5] created_ms         the submit time
-- ARGV[6] head               the queued event's JSON up to its seq
-- ARGV[7] tail               the queued event's JSON after its seq
-- ARGV[8] maxlen             the stream's approximate cap
-- ARGV[9] idempotency_ttl_s  how long the key lives; '' when the submit has no key
-- ARGV[10] max_depth         refuse when the queue holds this many jobs; '' no limit
-- const job_prefix           store.keys.JOB_PREFIX: a job's key is job_prefix .. '{' .. id .. '}'
-- ARGV[11] arq_id            the arq job's id (its member in the queue)
-- ARGV[12] payload           the arq job's payload
-- ARGV[13] expires_ms        the arq job key's lifetime
-- ARGV[14] score             the arq job's score in the queue
-- const wake_backlog         how many wake tokens the wake list keeps
-- ARGV[15] fair              '1': wait for a fair turn; '0': straight onto arq's queue (FIFO)
-- ARGV[16] priority          0 to 9, 9 first within the tenant
-- ARGV[17] weight            the tenant's weight to record; '' leaves the recorded one
-- ARGV[18] max_running       the tenant's cap to record; '' leaves it, '0' no cap
-- ARGV[19] job_tokens        the job's token cap, kept in its record; '' none
-- const fair_prefix          store.keys.FAIR_PREFIX
-- ARGV[20] webhook           the job's webhook JSON {"url", "events"} (webhook_record.lua); '' none
-- ARGV[21] index_keep        how many jobs each recent-jobs index keeps
-- ARGV[22] traceparent       the W3C trace context the job's spans continue (toolq/tracing); '' none
-- ARGV[23] tracestate        its tracestate; '' none
-- ARGV[24] prefer            the worker to offer the job to first; '' none
-- ARGV[25] prefer_wait_ms    how long the other workers leave it to that worker
-- ARGV[26] worker_wake_prefix  store.keys.worker_wake(model, ''): a worker's own wake list
-- ARGV[27] max_queued        the tenant's own cap on its queued jobs of the model; '' none
-- const usage_prefix         store.keys.USAGE_PREFIX (budget.lua)
-- const budget_held_prefix     store.keys.BUDGET_HELD_PREFIX
-- ARGV[28] tokens_per_day    the tenant's day budget; '' none
-- ARGV[29] tokens_per_minute the tenant's minute budget; '' none
-- ARGV[30] budget_ceiling    the tokens the job reserves (store/budget_holds.py); '' no budget
-- const bytes_prefix         store.keys.TENANT_BYTES_PREFIX (tenant_bytes.lua: the record's bytes)
-- ARGV[31] store_bytes       the bytes the tenant may keep in Redis; '' no quota
-- ARGV[32] spare             1: a job of spare capacity (a batch line), which dispatch.lua gives only
--                            to a free engine slot, never to a worker's interactive reserve
--
-- Returns {1, job id} created, {0, job id} the job the key already names, {-2, ''} no model was
-- given and the key names no job, admit.lua's refusal {code, count, limit, tenants}, or
-- budget.lua's {-20, budget, used, held, limit, ms until the window ends}, or tenant_bytes.lua's
-- {-30, held, quota, add, jobs, threads, files}.

if idempotency_ttl_s ~= '' then
  local existing = redis.call('GET', idempotency)
  if existing and redis.call('EXISTS', job_prefix .. '{' .. existing .. '}') == 1 then
    return {0, existing}
  end
end
if model == '' then return {-2, ''} end
local refused = admit(fair_prefix, model, tenant, queue, fair, max_depth, max_queued, job_prefix)
if refused then return refused end
local holds, spent = budget_check(usage_prefix, budget_held_prefix, tenant, tokens_per_day, tokens_per_minute, budget_ceiling)
if spent then return spent end
local full = bytes_charge(bytes_prefix, tenant, 'job', job, #request + #payload, store_bytes)
if full then return full end
if idempotency_ttl_s ~= '' then redis.call('SET', idempotency, job_id, 'EX', idempotency_ttl_s) end
redis.call('HSET', job, 'request', request, 'model', model, 'tenant', tenant, 'status', 'queued',
           'attempt', 1, 'seq', 1, 'created_ms', created_ms, 'priority', priority)
if job_tokens ~= '' then redis.call('HSET', job, 'job_tokens', job_tokens) end
budget_hold(job, holds)
if webhook ~= '' then redis.call('HSET', job, 'webhook', webhook) end
index_job(tenant_jobs, all_jobs, job_id, created_ms, index_keep)
if traceparent ~= '' then redis.call('HSET', job, 'traceparent', traceparent) end
if tracestate ~= '' then redis.call('HSET', job, 'tracestate', tracestate) end
if spare == '1' then redis.call('HSET', job, 'spare', 1) end
local ev = head .. '1' .. tail
redis.call('XADD', log, 'MAXLEN', '~', maxlen, '1-0', 'e', ev)
redis.call('PUBLISH', job_channel, ev)
redis.call('PUBLISH', all_channel, ev)
if fair == '1' then
  arq_store(arq_job, arq_result, arq_id, payload, expires_ms)
  fair_enqueue(tenants, passes, vtime, waiting, seq_key, weights, caps, tenant, job_id, priority, weight, max_running)
  affinity_prefer(job, prefer, prefer_wait_ms, worker_wake_prefix, wake_backlog)
else
  arq_enqueue(arq_job, arq_result, queue, arq_id, payload, expires_ms, score)
end
-- a line wakes only a worker with a free engine slot, the only place it may go
local woken = spare == '1' and spare_wake or wake
wake_push(woken, job_id, wake_backlog)
return {1, job_id}
