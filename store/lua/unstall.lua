-- Hand over the arq jobs of a model that a worker picked up but never started: the worker died
-- (or stalls) between arq marking the job in progress and toolq's `started` event (which takes
-- the lease). arq keeps its in-progress mark for the job timeout (an hour and more), and a job
-- without a lease is invisible to the lease reaper, so without this such a job would wait that
-- long. A job still `queued` in its record under the same attempt, whose mark was set more than
-- stall_ms ago, is given a lease that has already run out, so the next claim (claim.lua) takes it
-- over as a new attempt and enqueues that. The new attempt fences off the old picker: if it was
-- only slow, its `started` is refused (emit.lua), so the same attempt never runs twice, and the
-- wait can be seconds rather than long enough to be sure the picker is dead. The old attempt's
-- mark stays: its arq job is picked once the mark lapses, and ends at once as stale.
--
-- include: now.lua
--
-- KEYS[1] queue          the model's arq queue (sorted set of arq ids, scored by run-from ms)
-- KEYS[2] leases         sorted set: running job id -> lease deadline (ms, Redis's clock)
-- ARGV[1] progress_prefix arq's in-progress key prefix
-- const job_prefix       store.keys.JOB_PREFIX: a job's key is job_prefix .. '{' .. id .. '}'
-- ARGV[2] mark_ms        how long arq keeps an in-progress mark when it sets it
-- ARGV[3] stall_ms       a pickup this old that has not started is handed over
-- ARGV[4] limit          at most this many runnable queue entries are looked at
--
-- Returns the arq ids handed over.

local out = {}
local runnable = redis.call('ZRANGEBYSCORE', queue, '-inf', redis_now_ms(), 'LIMIT', 0, tonumber(limit))
for _, arq_id in ipairs(runnable) do
  local ttl = redis.call('PTTL', progress_prefix .. arq_id)
  if ttl > 0 and tonumber(mark_ms) - ttl > tonumber(stall_ms) then
    local job_id, attempt = string.match(arq_id, '^(.*):(%d+)$')
    if job_id then
      local h = redis.call('HMGET', job_prefix .. '{' .. job_id .. '}', 'status', 'attempt', 'terminal')
      if h[3] ~= '1' and h[1] == 'queued' and h[2] == attempt then
        -- ran out now, not at 0: claim.lua leaves leases older than a Redis restart alone a while
        if redis.call('ZADD', leases, 'NX', redis_now_ms(), job_id) == 1 then
          table.insert(out, arq_id)
        end
      end
    end
  end
end
return out
