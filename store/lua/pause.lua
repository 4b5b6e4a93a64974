-- Pause a running job for its caller (client tools, approvals) in one step: the
-- `requires_action` event, the status, the checkpoint, the calls it waits on and their deadline;
-- the lease goes (no worker holds the job) and the deadline is indexed for the sweeper
-- (toolq/pauses.py). Fenced by attempt, as emit.lua is.
--
-- A paused job holds no place against its tenant's running cap (store/fair.py).
--
-- include: now.lua
-- include: fair_keys.lua
-- include: webhook_record.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- KEYS[3] job_channel     pub/sub channel of this job's events
-- KEYS[4] all_channel     pub/sub channel of every job's events
-- KEYS[5] leases          sorted set: running job id -> lease deadline
-- KEYS[6] paused          sorted set: paused job id -> action deadline (unix ms)
-- KEYS[7] webhook_due     sorted set of due webhook deliveries (webhook_record.lua)
-- KEYS[8] webhook_wake    list that wakes the webhook sender
-- KEYS[9] webhook_delivery  the delivery's hash, written if the job's webhook wants requires_action
-- KEYS[10] webhook_job_log the job's list of delivery ids
-- ARGV[1] head            the event's JSON up to its seq
-- ARGV[2] tail            the event's JSON after its seq
-- ARGV[3] attempt         the writer's attempt
-- ARGV[4] checkpoint      the checkpoint JSON (the turn with its calls and the results so far)
-- ARGV[5] actions         JSON object: call id -> {kind, name, arguments, where, answer: null}
-- ARGV[6] deadline_ms     when the pause ends with error action_timeout
-- ARGV[7] job_id          the job's id
-- ARGV[8] maxlen          the stream's approximate cap
-- const running_prefix    store.keys.RUNNING_PREFIX
-- ARGV[9] webhook_kind     'requires_action'
-- ARGV[10] webhook_id     the delivery's id (its webhook-id header)
-- const answer_prefix     store.records.ANSWER_PREFIX: the last pause's answers are cleared
--
-- Returns the event's seq, or: 0 already ended, -1 taken over by a newer attempt, -3 no such job.

if redis.call('EXISTS', job) == 0 then return -3 end
local h = redis.call('HMGET', job, 'terminal', 'attempt')
if h[1] == '1' then return 0 end
if h[2] ~= attempt then return -1 end
if redis.call('HEXISTS', job, 'answered') == 1 then  -- the last pause's answers: its resume took them
  for _, f in ipairs(redis.call('HKEYS', job)) do
    if string.sub(f, 1, #answer_prefix) == answer_prefix then redis.call('HDEL', job, f) end
  end
  redis.call('HDEL', job, 'answered')
end
local seq = redis.call('HINCRBY', job, 'seq', 1)
local ev = head .. seq .. tail
redis.call('XADD', log, 'MAXLEN', '~', maxlen, seq .. '-0', 'e', ev)
redis.call('PUBLISH', job_channel, ev)
redis.call('PUBLISH', all_channel, ev)
redis.call('HSET', job, 'status', 'requires_action', 'checkpoint', checkpoint, 'actions', actions,
           'action_deadline_ms', deadline_ms)
redis.call('ZREM', leases, job_id)
redis.call('ZADD', paused, deadline_ms, job_id)
local tenant = redis.call('HGET', job, 'tenant')
if tenant then redis.call('ZREM', tenant_running_key(running_prefix, tenant), job_id) end
record_webhook(job, job_id, webhook_kind, webhook_id, webhook_delivery, webhook_due, webhook_wake, webhook_job_log, ev)
return seq
