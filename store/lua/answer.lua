-- Record a paused job's answers (tool results from its caller, or approvals) in one step, and
-- when none is missing, resume it: a new attempt, status `queued`, out of the paused index, its
-- arq job and a wake token, and the `queued` event. store/jobstore.py (JobStore.answer_actions)
-- checks the answers against the calls it read. Each answer is a field of its own
-- (`answer:<call id>`, store/records.py ANSWER_PREFIX), so an answer writes only itself, not the
-- whole `actions` again; the script writes only while the attempt is the one read and none of
-- the calls has an answer yet (else -4, and the caller reads again), so a call can never be
-- answered twice, even by two posts at once. `answered` counts them: the job resumes when it
-- reaches the pause's calls, whichever post brings the last. Refusals change nothing.
--
-- With fair share on (`fair` '1') the resumed attempt waits for its tenant's fair turn, as a
-- submitted job does (submit.lua), so a tenant's caps and share hold across pauses.
--
-- A resumed attempt joins the queue as a new job does: it meets the same bounds (admit.lua: the
-- model's depth, the tenant's share of a full queue, its max_queued) in this same step, before
-- anything is written. A refusal changes nothing (the answers are not recorded, the job stays
-- paused), so the caller can post the same answers again once the queue has room. So do the
-- tenant's token budgets (budget.lua): the job kept its reservation while paused, and a window
-- it holds nothing in (a new minute or day since it was charged) charges it anew, or refuses.
--
-- Under fair share the resumed attempt is offered first to the worker that ran the paused one
-- (the record's `worker`), which may still hold its conversation (affinity_prefer.lua).
--
-- include: wake_push.lua
-- include: now.lua
-- include: arq_enqueue.lua
-- include: fair_keys.lua
-- include: fair_enqueue.lua
-- include: admit.lua
-- include: affinity_prefer.lua
-- include: budget.lua
-- include: tenant_bytes.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- KEYS[3] job_channel     pub/sub channel of this job's events
-- KEYS[4] all_channel     pub/sub channel of every job's events
-- KEYS[5] paused          sorted set: paused job id -> action deadline (unix ms)
-- KEYS[6] arq_job         the new attempt's arq job key
-- KEYS[7] arq_result      the new attempt's arq result key
-- KEYS[8] queue           the model's queue (arq's sorted set)
-- KEYS[9] wake            the model's wake list
-- KEYS[10] tenants        the model's active tenants (sorted set: tenant -> pass)
-- KEYS[11] passes         the model's saved passes of idle tenants (hash)
-- KEYS[12] vtime          the model's virtual time
-- KEYS[13] waiting        the job's tenant's waiting set for the model
-- KEYS[14] seq_key        the model's arrival counter
-- KEYS[15] weights        tenant -> weight (hash)
-- KEYS[16] caps           tenant -> most jobs running at once (hash)
-- ARGV[1] job_id          the job's id
-- ARGV[2] tenant          only this tenant's job; '' any
-- ARGV[3] attempt         the paused attempt the snapshot was read from
-- ARGV[4] answers         JSON array of [call id, the answer's JSON], checked against the calls
-- ARGV[5] total           how many calls the pause waits on
-- const answer_prefix     store.records.ANSWER_PREFIX
-- ARGV[6] head            the queued event's JSON up to its seq
-- ARGV[7] tail            the queued event's JSON after its seq
-- ARGV[8] maxlen          the stream's approximate cap
-- ARGV[9] arq_id          the new attempt's arq id (its member in the queue)
-- ARGV[10] payload        the new attempt's arq payload
-- ARGV[11] expires_ms     the arq job key's lifetime
-- ARGV[12] score          the arq job's score in the queue
-- const wake_backlog      how many wake tokens the wake list keeps
-- ARGV[13] fair           '1': wait for a fair turn; '0': straight onto arq's queue
-- ARGV[14] prefer_wait_ms how long other workers leave the resumed attempt to the paused one's; '' or 0 none
-- ARGV[15] worker_wake_prefix  store.keys.worker_wake(model, '')
-- ARGV[16] model          the job's model (its queue, for admit.lua)
-- const fair_prefix       store.keys.FAIR_PREFIX, for the queue bounds (admit.lua)
-- ARGV[17] max_depth      the model's queue depth (admit.lua); '' no limit
-- ARGV[18] max_queued     the tenant's own cap on its queued jobs of the model; '' none
-- const job_prefix        store.keys.JOB_PREFIX
-- const usage_prefix      store.keys.USAGE_PREFIX (budget.lua)
-- const budget_held_prefix     store.keys.BUDGET_HELD_PREFIX
-- ARGV[19] tokens_per_day the tenant's day budget; '' none
-- ARGV[20] tokens_per_minute  the tenant's minute budget; '' none
-- ARGV[21] budget_ceiling the tokens the job reserves (store/budget_holds.py); '' no budget
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX (tenant_bytes.lua: what the answers add)
-- ARGV[22] store_bytes    the bytes the tenant may keep in Redis; '' no quota
--
-- Returns {1, ''} recorded (answers still missing), {2, seq} recorded and resumed (seq of the
-- queued event), {0, status} the job ended, {-2, status} the job is not paused, {-3, ''} no such
-- job (or another tenant's), {-4, ''} the record changed since it was read, or the queue bounds'
-- refusal {-10 + admit.lua's code, count, limit, tenants} (-11, -13, -14 as thread_run.lua's), or
-- budget.lua's {-20, budget, used, held, limit, ms until the window ends}, or tenant_bytes.lua's
-- {-30, held, quota, add, jobs, threads, files}: the answers' bytes would take the tenant past its quota.

local h = redis.call('HMGET', job, 'tenant', 'terminal', 'status', 'attempt', 'answered', 'priority', 'worker')
if not h[1] or (tenant ~= '' and h[1] ~= tenant) then return {-3, ''} end
if h[2] == '1' then return {0, h[3]} end
if h[3] ~= 'requires_action' then return {-2, h[3] or ''} end
if h[4] ~= attempt then return {-4, ''} end
local given = cjson.decode(answers)
for _, a in ipairs(given) do
  if redis.call('HEXISTS', job, answer_prefix .. a[1]) == 1 then return {-4, ''} end
end
local answered = (tonumber(h[5] or '0') or 0) + #given
local complete = answered >= tonumber(total)
local holds
if complete then  -- the answers resume it: it meets a new job's admission first
  local refused = admit(fair_prefix, model, h[1], queue, fair, max_depth, max_queued, job_prefix)
  if refused then
    refused[1] = refused[1] - 10
    return refused
  end
  local spent
  holds, spent = budget_check(usage_prefix, budget_held_prefix, h[1], tokens_per_day, tokens_per_minute, budget_ceiling, job)
  if spent then return spent end
end
local full = bytes_charge(bytes_prefix, h[1], 'job', job, #answers, store_bytes)
if full then return full end
for _, a in ipairs(given) do
  redis.call('HSET', job, answer_prefix .. a[1], a[2])
end
redis.call('HSET', job, 'answered', answered)
if not complete then return {1, ''} end
budget_hold(job, holds)
redis.call('HINCRBY', job, 'attempt', 1)
redis.call('HSET', job, 'status', 'queued')
redis.call('ZREM', paused, job_id)
local seq = redis.call('HINCRBY', job, 'seq', 1)
local ev = head .. seq .. tail
redis.call('XADD', log, 'MAXLEN', '~', maxlen, seq .. '-0', 'e', ev)
redis.call('PUBLISH', job_channel, ev)
redis.call('PUBLISH', all_channel, ev)
if fair == '1' then
  arq_store(arq_job, arq_result, arq_id, payload, expires_ms)
  fair_enqueue(tenants, passes, vtime, waiting, seq_key, weights, caps, h[1], job_id, h[6] or '0', '', '')
  affinity_prefer(job, h[7] or '', prefer_wait_ms, worker_wake_prefix, wake_backlog)
else
  arq_enqueue(arq_job, arq_result, queue, arq_id, payload, expires_ms, score)
end
wake_push(wake, job_id, wake_backlog)
return {2, seq}
