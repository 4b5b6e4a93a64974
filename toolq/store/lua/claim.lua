-- Take over every job of a model whose lease ran out: each gets a new attempt (which fences off
-- its old worker's writes) and the status `queued`; the caller enqueues the new attempts. The
-- claim leaves a short lease, so a claim whose enqueue never happens (the claimer died in
-- between) is claimed again rather than lost. Leases of ended or vanished jobs are dropped.
--
-- After Redis restarts (its data restored from the AOF), every lease it holds has run out while
-- it was down, live workers' jobs too. For settle_ms after the start, a lease that ran out
-- before the start is left alone, so live workers can renew theirs first; only leases of
-- workers that stay silent are taken.
--
-- include: now.lua
--
-- KEYS[1] leases      sorted set: running job id -> lease deadline (ms, Redis's clock)
-- ARGV[1] model       only this model's jobs are taken
-- ARGV[2] job_prefix  toolq.keys.JOB_PREFIX: a job's key is job_prefix .. '{' .. id .. '}'
-- ARGV[3] grace_ms    the lease the new attempt gets to start in
-- ARGV[4] limit       at most this many expired leases are looked at
-- ARGV[5] settle_ms   after a Redis start, how long leases older than the start are left alone
--
-- Returns {job id, new attempt, job id, new attempt, ...}.

local now = redis_now_ms()
local uptime_s = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
local started = now - (uptime_s + 1) * 1000  -- whole seconds: err towards an earlier start
local floor = '-inf'
if now < started + tonumber(settle_ms) then floor = started end  -- only leases set since the start
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', leases, floor, now, 'LIMIT', 0, tonumber(limit))) do
  local key = job_prefix .. '{' .. id .. '}'
  local h = redis.call('HMGET', key, 'terminal', 'model')
  if h[1] == '1' or not h[2] then
    redis.call('ZREM', leases, id)
  elseif h[2] == model then
    local attempt = redis.call('HINCRBY', key, 'attempt', 1)
    redis.call('HSET', key, 'status', 'queued')
    redis.call('ZADD', leases, now + tonumber(grace_ms), id)
    table.insert(out, id)
    table.insert(out, attempt)
  end
end
return out
