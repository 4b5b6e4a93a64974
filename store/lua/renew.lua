-- Extend a running job's lease, but only while this attempt still owns the job and it has not
-- ended.
--
-- include: now.lua
--
-- KEYS[1] leases    sorted set: running job id -> lease deadline (ms, Redis's clock)
-- KEYS[2] job       the job record (hash)
-- ARGV[1] job_id    the job's id (its member in leases)
-- ARGV[2] attempt   the renewing worker's attempt
-- ARGV[3] lease_ms  the new lease, from now
--
-- Returns 1 renewed, 0 the attempt no longer owns the job.
--
-- A worker that renews an attempt claim.lua took over for a lease that ran out is alive: its
-- loop stalled (or it lost Redis) past its lease, so that attempt's end is noted as `stalled`.

local h = redis.call('HMGET', job, 'attempt', 'terminal', 'attempts')
if h[1] ~= attempt and h[3] then
  local ends = cjson.decode(h[3])
  for _, e in ipairs(ends) do
    if e.attempt == tonumber(attempt) and e.ended == 'lease_expired' then
      e.ended = 'stalled'
      redis.call('HSET', job, 'attempts', cjson.encode(ends))
      break
    end
  end
end
if h[1] ~= attempt or h[2] == '1' then return 0 end
redis.call('ZADD', leases, redis_now_ms() + tonumber(lease_ms), job_id)
return 1
