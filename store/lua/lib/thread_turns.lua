-- requires: wake_push.lua
-- requires: now.lua
-- requires: arq_enqueue.lua
-- requires: fair_keys.lua
-- requires: fair_enqueue.lua
-- requires: affinity_prefer.lua
-- Shared by the thread scripts that start runs (`-- include: thread_turns.lua`): whose turn it is
-- on a thread. store/threads.py explains the model: a thread has at most one active run (its
-- hash's `active`); others wait in `<thread>:waiting`, scored by turn. A thread's keys are its
-- hash key plus a suffix (store/keys.py: thread_*).

-- Start a run: its request becomes the thread's messages as they are now followed by its input
-- (the record holds the request's JSON around its messages: th_head, th_input, th_tail), it
-- becomes the active run, and it is queued (arq job, wake token) as POST /v1/jobs would: under
-- fair share (the record's th_fair holds store.keys.FAIR_PREFIX) it joins its tenant's
-- waiting set and takes its tenant's fair turn (fair_enqueue.lua), whether it starts at once or
-- after the run before it ended; otherwise straight onto arq's queue. Under fair share the run is
-- offered first to the worker that ran the thread's last run (the thread's `holder`, written by
-- thread_end.lua), which holds the thread's state (store/affinity.py), when that run was of
-- the same model.
local function thread_start(tkey, jkey, run_id)
  local r = redis.call('HMGET', jkey, 'th_head', 'th_input', 'th_tail', 'th_arq_job', 'th_arq_result',
                       'th_queue', 'th_arq_id', 'th_payload', 'th_expires_ms', 'th_wake', 'th_wake_backlog',
                       'th_lead', 'th_fair', 'model', 'tenant', 'th_priority', 'th_prefer_wait', 'th_worker_wake')
  local history = redis.call('LRANGE', tkey .. ':messages', 0, -1)
  local body = table.concat(history, ',')
  if #history > 0 and r[2] ~= '' then body = body .. ',' end
  redis.call('HSET', jkey, 'request', r[1] .. body .. r[2] .. r[3], 'thread_from', #history + tonumber(r[12]))
  redis.call('HSET', tkey, 'active', run_id)
  -- th_payload is hex: a job record holds text only (JobStore decodes every field as UTF-8)
  local payload = string.gsub(r[8], '..', function(h) return string.char(tonumber(h, 16)) end)
  local fp = r[13]
  if fp and fp ~= '' then
    local m, tenant = r[14], r[15]
    local priority = (r[16] and r[16] ~= '') and r[16] or '0'
    -- no longer waiting behind its thread: out of its tenant's queued count there (admit.lua)
    local held = fair_model_key(fp, m, 'held')
    redis.call('ZREM', held, run_id)
    redis.call('HDEL', held .. ':of', run_id)
    redis.call('ZREM', held .. ':' .. tenant, run_id)
    arq_store(r[4], r[5], r[7], payload, r[9])
    local holder = redis.call('HMGET', tkey, 'holder', 'holder_model')
    if holder[1] and holder[1] ~= '' and holder[2] == m and r[17] and r[18] then
      affinity_prefer(jkey, holder[1], r[17], r[18], r[11])
    end
    fair_enqueue(fair_model_key(fp, m, 'tenants'), fair_model_key(fp, m, 'passes'), fair_model_key(fp, m, 'vtime'),
                 fair_waiting_key(fp, m, tenant), fair_model_key(fp, m, 'seq'), '', '',
                 tenant, run_id, priority, '', '')
  else
    arq_enqueue(r[4], r[5], r[6], r[7], payload, r[9], redis_now_ms())
  end
  wake_push(r[10], run_id, r[11])
end

-- The active run has ended: start the next waiting one that has not ended meanwhile, if any.
local function thread_next(tkey, job_prefix)
  redis.call('HSET', tkey, 'active', '')
  while true do
    local nxt = redis.call('ZRANGE', tkey .. ':waiting', 0, 0)[1]
    if not nxt then return end
    redis.call('ZREM', tkey .. ':waiting', nxt)
    local jkey = job_prefix .. '{' .. nxt .. '}'
    if redis.call('EXISTS', jkey) == 1 and redis.call('HGET', jkey, 'terminal') ~= '1' then
      thread_start(tkey, jkey, nxt)
      return
    end
  end
end
