-- A new run on a thread, with the caller's double-texting policy decided in the same step, so
-- any number of runs posted at once see one order (store/threads.py: ThreadStore.run).
--
-- The run is always a job of its own: its record (with the request's JSON around its messages,
-- to be joined with the thread's messages when it starts) and its `queued` event. Then, when no
-- run is active it starts now (thread_turns.lua: thread_start). When one is:
--   reject    nothing is written; the active run's id is returned
--   enqueue   it waits behind every run already waiting
--   interrupt the active run is asked to stop (its cancel key) and keeps its partial history;
--             the new run waits ahead of every enqueued run (behind earlier interrupters)
--   rollback  the same, but the active run's history is dropped and it leaves the runs list
--
-- include: now.lua
-- include: arq_enqueue.lua
-- include: fair_keys.lua
-- include: fair_enqueue.lua
-- include: admit.lua
-- include: affinity_prefer.lua
-- include: thread_turns.lua
-- include: thread_touch.lua
-- include: job_index.lua
-- include: budget.lua
-- include: tenant_bytes.lua
--
-- KEYS[1] thread          the thread's hash
-- KEYS[2] waiting         the thread's waiting runs (sorted set)
-- KEYS[3] runs            the thread's run ids (list)
-- KEYS[4] job             the new run's job record (hash)
-- KEYS[5] log             the new run's event stream
-- KEYS[6] job_channel     pub/sub channel of the new run's events
-- KEYS[7] all_channel     pub/sub channel of every job's events
-- KEYS[8] tenant_jobs     the tenant's recent jobs (job_index.lua)
-- KEYS[9] all_jobs        every tenant's recent jobs
-- ARGV[1] thread_id       the thread's id
-- ARGV[2] tenant          the caller's tenant: another tenant's thread is not found
-- ARGV[3] job_id          the new run's job id
-- ARGV[4] strategy        reject | enqueue | interrupt | rollback
-- ARGV[5] keep            'partial' keeps this run's history even if it fails or is cancelled; ''
-- ARGV[6] model           the run's model
-- ARGV[7] created_ms      the submit time
-- ARGV[8] head            the queued event's JSON up to its seq
-- ARGV[9] tail            the queued event's JSON after its seq
-- ARGV[10] maxlen         the stream's approximate cap
-- ARGV[11] req_head       the request's JSON up to its messages' first element
-- ARGV[12] req_input      the run's input messages' JSON, comma-joined
-- ARGV[13] req_tail       the request's JSON after its messages' last element
-- const job_prefix        store.keys.JOB_PREFIX
-- const cancel_prefix     store.keys.CANCEL_PREFIX
-- ARGV[14] cancel_ttl_s   how long a cancel key lives
-- ARGV[15] arq_job        the arq job key
-- ARGV[16] arq_result     the arq result key
-- ARGV[17] queue          the model's queue (arq's sorted set)
-- ARGV[18] arq_id         the arq job's id
-- ARGV[19] payload        the arq job's payload, in hex
-- ARGV[20] expires_ms     the arq job key's lifetime
-- ARGV[21] wake           the model's wake list
-- const wake_backlog      how many wake tokens the wake list keeps
-- ARGV[22] lead           how many messages req_head holds (instructions, kept out of the thread)
-- ARGV[23] index_keep     how many jobs each recent-jobs index keeps
-- const fair_prefix       store.keys.FAIR_PREFIX: the queue bounds (admit.lua), fair or not, and under
--                         fair share the run's tenant's fair turn (thread_turns.lua: thread_start)
-- ARGV[24] priority       the run's priority within its tenant, 0 to 9
-- ARGV[25] weights        tenant -> weight (hash), as submit.lua records it
-- ARGV[26] caps           tenant -> most jobs running at once (hash)
-- ARGV[27] weight         the tenant's weight to record; '' leaves the recorded one
-- ARGV[28] max_running    the tenant's cap to record; '' leaves it, '0' no cap
-- ARGV[29] job_tokens     the run's token cap, kept in its record (worker/budget.py); '' none
-- ARGV[30] prefer_wait_ms how long other workers leave the run to the worker that ran the thread's
--                         last run (thread_turns.lua: thread_start); 0 none
-- ARGV[31] worker_wake_prefix  store.keys.worker_wake(model, '')
-- ARGV[32] traceparent    the W3C trace context the run's spans continue (toolq/tracing/carrier.py); '' none
-- ARGV[33] tracestate     its tracestate; '' none
-- ARGV[34] fair           '1' under fair share (the tenant's own queued count is kept)
-- ARGV[35] max_depth      the model's queue depth (admit.lua); '' no limit
-- ARGV[36] max_queued     the tenant's own cap on its queued jobs of the model; '' none
-- ARGV[37] webhook        the run's webhook JSON {"url", "events"} (webhook_record.lua); '' none
-- ARGV[38] max_messages   the most the thread may hold with the input: its cap, or the job's less lead; '' none
-- ARGV[39] input_count    how many messages the run's input adds to the thread
-- const usage_prefix      store.keys.USAGE_PREFIX (budget.lua: the run reserves its token ceiling)
-- const budget_held_prefix     store.keys.BUDGET_HELD_PREFIX
-- ARGV[40] tokens_per_day the tenant's day budget; '' none
-- ARGV[41] tokens_per_minute  the tenant's minute budget; '' none
-- ARGV[42] budget_ceiling the tokens the run reserves (store/budget_holds.py); '' no budget
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX (tenant_bytes.lua: the run's record)
-- ARGV[43] store_bytes    the bytes the tenant may keep in Redis; '' no quota
--
-- Returns {1, ''} started, {2, active} waiting behind the active run, {3, active} waiting while
-- the active run is being stopped, {-1, active} rejected, {-3, ''} no such thread, or the queue
-- bounds' refusal {-10 + admit.lua's code, count, limit, tenants}: -11 the model's queue is full,
-- -13 the tenant's own cap, -14 its share of a full queue; {-5, count, max_messages} the thread
-- holds too many messages for the run's input (a run's own output may take it past the cap once:
-- it is appended when the run ends, and never refused then); budget.lua's {-20, budget, used, held,
-- limit, ms until the window ends} when the tenant's token budgets have no room; tenant_bytes.lua's
-- {-30, held, quota, add, jobs, threads, files} when the tenant keeps its quota of bytes. A run that waits behind the active one
-- counts as queued (admit_hold) until its turn comes (thread_turns.lua: thread_start).

if redis.call('HGET', thread, 'tenant') ~= tenant then return {-3, ''} end
local active = redis.call('HGET', thread, 'active') or ''
if active ~= '' then
  local akey = job_prefix .. '{' .. active .. '}'
  if redis.call('EXISTS', akey) == 0 or redis.call('HGET', akey, 'terminal') == '1' then
    -- its record expired without its end reaching the thread: let the line move on
    thread_next(thread, job_prefix)
    active = redis.call('HGET', thread, 'active') or ''
  end
end
if active ~= '' and strategy == 'reject' then return {-1, active} end
if max_messages ~= '' then
  local count = redis.call('LLEN', thread .. ':messages')
  if count + tonumber(input_count) > tonumber(max_messages) then return {-5, count, tonumber(max_messages)} end
end
local refused = admit(fair_prefix, model, tenant, queue, fair, max_depth, max_queued, job_prefix)
if refused then
  refused[1] = refused[1] - 10
  return refused
end
local holds, spent = budget_check(usage_prefix, budget_held_prefix, tenant, tokens_per_day, tokens_per_minute, budget_ceiling)
if spent then return spent end
-- the record keeps the request's parts twice (request, th_*) and starts with a copy of the history
local messages = thread .. ':messages'
bytes_fold(bytes_prefix, tenant, thread, messages)
local history = bytes_of(bytes_prefix, tenant, 'thread', messages)
local record = 2 * (#req_head + #req_input + #req_tail) + #payload + history
local full = bytes_charge(bytes_prefix, tenant, 'job', job, record, store_bytes)
if full then return full end

local turn = redis.call('HINCRBY', thread, 'arrivals', 1)
redis.call('HSET', job, 'request', req_head .. req_input .. req_tail, 'model', model, 'tenant', tenant,
           'status', 'queued', 'attempt', 1, 'seq', 1, 'created_ms', created_ms,
           'thread', thread_id, 'thread_keep', keep, 'thread_strategy', strategy,
           'th_head', req_head, 'th_lead', lead, 'th_input', req_input, 'th_tail', req_tail,
           'th_arq_job', arq_job, 'th_arq_result', arq_result, 'th_queue', queue, 'th_arq_id', arq_id,
           'th_payload', payload, 'th_expires_ms', expires_ms, 'th_wake', wake, 'th_wake_backlog', wake_backlog,
           'th_fair', fair == '1' and fair_prefix or '', 'th_priority', priority,
           'th_prefer_wait', prefer_wait_ms, 'th_worker_wake', worker_wake_prefix)
if job_tokens ~= '' then redis.call('HSET', job, 'job_tokens', job_tokens) end
budget_hold(job, holds)
if webhook ~= '' then redis.call('HSET', job, 'webhook', webhook) end
if traceparent ~= '' then redis.call('HSET', job, 'traceparent', traceparent, 'tracestate', tracestate) end
if weight ~= '' then redis.call('HSET', weights, tenant, weight) end
if max_running ~= '' then redis.call('HSET', caps, tenant, max_running) end
local ev = head .. '1' .. tail
redis.call('XADD', log, 'MAXLEN', '~', maxlen, '1-0', 'e', ev)
redis.call('PUBLISH', job_channel, ev)
redis.call('PUBLISH', all_channel, ev)
redis.call('RPUSH', runs, job_id)
index_job(tenant_jobs, all_jobs, job_id, created_ms, index_keep)

local code = 1
if active == '' then
  thread_start(thread, job, job_id)
elseif strategy == 'enqueue' then
  redis.call('ZADD', waiting, turn, job_id)
  code = 2
else
  local akey = job_prefix .. '{' .. active .. '}'
  if strategy == 'rollback' then
    redis.call('HSET', akey, 'thread_keep', 'none')
    redis.call('LREM', runs, 0, active)
  elseif redis.call('HGET', akey, 'thread_keep') ~= 'none' then
    redis.call('HSET', akey, 'thread_keep', 'partial')
  end
  redis.call('SET', cancel_prefix .. '{' .. active .. '}', 1, 'EX', cancel_ttl_s)
  -- ahead of every enqueued run, behind the interrupters that came first
  redis.call('ZADD', waiting, turn - 1e15, job_id)
  code = 3
end
if code ~= 1 and fair == '1' then admit_hold(fair_prefix, model, tenant, job_id, created_ms) end
thread_touch(thread)
return {code, active}
