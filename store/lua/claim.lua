-- Take over every job of a model whose lease ran out: each gets a new attempt (which fences off
-- its old worker's writes) and the status `queued`; the caller enqueues the new attempts. The
-- claim leaves a short lease, so a claim whose enqueue never happens (the claimer died in
-- between) is claimed again rather than lost. Leases of ended or vanished jobs are dropped.
--
-- After Redis restarts (its data restored from the AOF), every lease it holds has run out while
-- it was down, live workers' jobs too. For settle_ms after the start, a lease that ran out
-- before the start is left alone, so live workers can renew theirs first; only leases of
-- workers that stay silent are taken. A lease handed back (deadline 0) is taken at once: no
-- worker holds it.
--
-- Attempts are bounded (a poison job would otherwise take down every worker that takes it over):
-- each taken-over attempt is appended to the record's `attempts` with its worker and how it
-- ended. One that started (`worker_attempt`, set with `started` by start.lua) and whose lease ran
-- out counts as lost; one taken over before it started, or handed back (a lease released to 0 on
-- shutdown, store/leases.py), does not: its job cannot have harmed a worker. When the
-- lost attempts reach max_attempts the job is quarantined instead: it gets a new attempt all the
-- same (fencing off the old worker), is marked `quarantined`, counted in `quarantined` per
-- model, and returned for the caller to end with `error` / `worker_lost` through the ordinary
-- terminal event (store/quarantine.py). The claim's short lease covers that write too: a
-- quarantined job whose claimer died is returned again, under the same attempt, and never run.
--
-- include: now.lua
--
-- KEYS[1] leases       sorted set: running job id -> lease deadline (ms, Redis's clock)
-- KEYS[2] quarantined  hash: model -> jobs quarantined so far
-- ARGV[1] model        only this model's jobs are taken
-- const job_prefix     store.keys.JOB_PREFIX: a job's key is job_prefix .. '{' .. id .. '}'
-- ARGV[2] grace_ms     the lease the new attempt gets to start in
-- ARGV[3] limit        at most this many expired leases are looked at
-- ARGV[4] settle_ms    after a Redis start, how long leases older than the start are left alone
-- ARGV[5] max_attempts lost attempts after which the job is quarantined
--
-- Returns {job id, new attempt, quarantine (1 or 0), ...}.

local now = redis_now_ms()
local uptime_s = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
local started = now - (uptime_s + 1) * 1000  -- whole seconds: err towards an earlier start
local expired
if now < started + tonumber(settle_ms) then
  -- settling: the leases set since the start, and those handed back (deadline 0), which no
  -- worker holds and so none will renew
  expired = redis.call('ZRANGEBYSCORE', leases, 0, 0, 'WITHSCORES', 'LIMIT', 0, tonumber(limit))
  local room = tonumber(limit) - #expired / 2
  if room > 0 then
    for _, v in ipairs(redis.call('ZRANGEBYSCORE', leases, started, now, 'WITHSCORES', 'LIMIT', 0, room)) do
      table.insert(expired, v)
    end
  end
else
  expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(limit))
end
local out = {}
for i = 1, #expired, 2 do
  local id, deadline = expired[i], tonumber(expired[i + 1])
  local key = job_prefix .. '{' .. id .. '}'
  local h = redis.call('HMGET', key, 'terminal', 'model', 'attempt', 'worker', 'worker_attempt', 'quarantined',
    'lost_attempts', 'attempts')
  if h[1] == '1' or not h[2] then
    redis.call('ZREM', leases, id)
  elseif h[2] == model and h[6] == '1' then
    -- quarantined by a claimer that died before ending it: end it now, under the same attempt
    redis.call('ZADD', leases, now + tonumber(grace_ms), id)
    table.insert(out, id)
    table.insert(out, tonumber(h[3]))
    table.insert(out, 1)
  elseif h[2] == model then
    local ran = h[3] and h[5] == h[3]  -- this attempt wrote its `started`
    local ended = 'not_started'
    if deadline == 0 then ended = 'handed_back' elseif ran then ended = 'lease_expired' end
    local ends = h[8] and cjson.decode(h[8]) or {}
    table.insert(ends, {attempt = tonumber(h[3] or '1'), worker = ran and h[4] or '', ended = ended, ms = now})
    -- a busy fleet can take over a job that never starts again and again: keep the newest
    while #ends > 32 do table.remove(ends, 1) end
    local lost = tonumber(h[7] or '0')
    if ended == 'lease_expired' then lost = lost + 1 end
    local attempt = redis.call('HINCRBY', key, 'attempt', 1)
    redis.call('HSET', key, 'attempts', cjson.encode(ends), 'lost_attempts', lost)
    redis.call('ZADD', leases, now + tonumber(grace_ms), id)
    local quarantine = 0
    if lost >= tonumber(max_attempts) then
      quarantine = 1
      redis.call('HSET', key, 'quarantined', '1')
      redis.call('HINCRBY', quarantined, model, 1)
    else
      redis.call('HSET', key, 'status', 'queued')
    end
    table.insert(out, id)
    table.insert(out, attempt)
    table.insert(out, quarantine)
  end
end
return out
