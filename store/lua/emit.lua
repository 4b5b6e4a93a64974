-- Write one event of a job: allocate the next seq, append the event to the job's stream (id
-- `<seq>-0`), publish it on both channels (event_write.lua) and update the record, all in one
-- step. An event that touches nothing but its job goes through job_event.lua instead. Once a
-- terminal event is written every later write is refused, and a write fenced by attempt is
-- refused once a newer attempt owns the job (its worker lost its lease).
--
-- A terminal event also takes the job out of its tenant's running set (store/fair.py: the
-- place it held against its tenant's running cap) and, given the worker's token figures, adds
-- them to its tenant's usage totals (store/usage.py): once per job, since a job has one
-- terminal event. The minute and day windows count tokens earlier, round by round: an event
-- that carries a checkpoint and the job's figures so far adds what they add (count_window_tokens).
-- A job cancelled while it waited for its fair turn stays in its waiting set until
-- dispatch.lua drops it, as a cancelled job stays on arq's queue until a worker drops it: both
-- count in the queue depth until then. The tokens a job reserved against its tenant's budgets
-- (budget.lua) turn into use as they are counted, and its terminal event gives back the rest.
--
-- include: event_write.lua
-- include: now.lua
-- include: fair_keys.lua
-- include: webhook_record.lua
-- include: arq_enqueue.lua
-- include: fair_enqueue.lua
-- include: affinity_prefer.lua
-- include: thread_turns.lua
-- include: thread_touch.lua
-- include: thread_end.lua
-- include: budget.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- KEYS[3] job_channel     pub/sub channel of this job's events
-- KEYS[4] all_channel     pub/sub channel of every job's events
-- KEYS[5] leases          sorted set: running job id -> lease deadline (ms, Redis's clock)
-- KEYS[6] webhook_due     sorted set of due webhook deliveries (webhook_record.lua)
-- KEYS[7] webhook_wake    list that wakes the webhook sender
-- KEYS[8] webhook_delivery  the delivery's hash, written if the job's webhook wants this event
-- KEYS[9] webhook_job_log the job's list of delivery ids
-- ARGV[1] head            the event's JSON up to its seq
-- ARGV[2] tail            the event's JSON after its seq
-- ARGV[3] terminal        '1' for final, error or cancelled
-- ARGV[4] attempt         the writer's attempt; '0' writes unfenced
-- ARGV[5] only_if_status  write only while the job has this status; '' any
-- ARGV[6] status          the job's new status; '' keeps it
-- ARGV[7] result          the result JSON, stored with a terminal event
-- ARGV[8] checkpoint      the checkpoint JSON; '' keeps the stored one
-- ARGV[9] maxlen          the stream's approximate cap
-- ARGV[10] ttl_s          how long the record and stream live after the terminal event
-- ARGV[11] job_id         the job's id (its member in leases)
-- ARGV[12] lease_ms       set the lease this long from now; '' leaves it
-- ARGV[13] now_ms         the writer's time, stored as finished_ms
-- const running_prefix    store.keys.RUNNING_PREFIX
-- const usage_prefix      store.keys.USAGE_PREFIX
-- ARGV[14] prompt_tokens  the job's prompt tokens so far, counted with a terminal event or a
--                         checkpoint; '' none
-- ARGV[15] completion_tokens  the job's completion tokens so far; '' none
-- ARGV[16] webhook_kind   the webhook event this event is (completed, failed, cancelled); '' none
-- ARGV[17] webhook_id     the delivery's id (its webhook-id header)
-- ARGV[18] thread_messages  a thread run's messages for its thread (thread_end.lua); '' none
-- const thread_prefix     store.keys.THREAD_PREFIX
-- const job_prefix        store.keys.JOB_PREFIX
--
-- Returns the event's seq, or: 0 already ended, -1 taken over by a newer attempt,
-- -2 not in the expected status, -3 no such job.

-- The tenant's minute and day windows (store/usage.py) get the job's tokens as they are
-- spent: `so_far` is the job's total in the worker's figures, and only what it adds to the
-- record's `counted_tokens` is counted. Non-terminal events pass it with a checkpoint, in the
-- same step, so `counted_tokens` is always the usage of the stored checkpoint: an attempt
-- resumed from it starts counting from there and no round is counted twice.
local function count_window_tokens(tenant, so_far)
  local delta = so_far - (tonumber(redis.call('HGET', job, 'counted_tokens') or '0') or 0)
  if delta <= 0 then return end
  redis.call('HSET', job, 'counted_tokens', so_far)
  local t = redis_now_ms()
  local minute = usage_prefix .. tenant .. ':minute:' .. math.floor(t / 60000)
  local day = usage_prefix .. tenant .. ':day:' .. math.floor(t / 86400000)
  -- a window's counter is made by its first INCRBY (delta > 0), which alone sets its lifetime
  if redis.call('INCRBY', minute, delta) == delta then redis.call('EXPIRE', minute, 120) end
  if redis.call('INCRBY', day, delta) == delta then redis.call('EXPIRE', day, 2 * 86400) end
  budget_spend(job, delta)
end

local seq, ev, who = write_event(job, log, job_channel, all_channel, head, tail, attempt, only_if_status, maxlen)
if seq <= 0 then return seq end
if terminal == '1' and status ~= '' then  -- a job's end: one HSET
  redis.call('HSET', job, 'status', status, 'terminal', '1', 'result', result, 'finished_ms', now_ms)
elseif terminal == '1' then
  redis.call('HSET', job, 'terminal', '1', 'result', result, 'finished_ms', now_ms)
elseif status ~= '' then
  redis.call('HSET', job, 'status', status)
end
if checkpoint ~= '' then redis.call('HSET', job, 'checkpoint', checkpoint) end
if terminal ~= '1' and checkpoint ~= '' and (prompt_tokens ~= '' or completion_tokens ~= '') then
  if who then count_window_tokens(who, (tonumber(prompt_tokens) or 0) + (tonumber(completion_tokens) or 0)) end
end
if lease_ms ~= '' then redis.call('ZADD', leases, redis_now_ms() + tonumber(lease_ms), job_id) end
if terminal == '1' then
  redis.call('ZREM', leases, job_id)
  redis.call('EXPIRE', job, ttl_s)
  redis.call('EXPIRE', log, ttl_s)
  if who then
    redis.call('ZREM', tenant_running_key(running_prefix, who), job_id)
    if prompt_tokens ~= '' or completion_tokens ~= '' then
      local p, c = tonumber(prompt_tokens) or 0, tonumber(completion_tokens) or 0
      count_window_tokens(who, p + c)
      local total = usage_prefix .. who
      redis.call('HINCRBY', total, 'prompt_tokens', p)
      redis.call('HINCRBY', total, 'completion_tokens', c)
      redis.call('HINCRBY', total, 'tokens', p + c)
      redis.call('HINCRBY', total, 'jobs', 1)
    end
  end
  budget_spend(job, nil)
  thread_end(job, job_id, status, thread_messages, thread_prefix, job_prefix)
end
record_webhook(job, job_id, webhook_kind, webhook_id, webhook_delivery, webhook_due, webhook_wake, webhook_job_log, ev)
return seq
