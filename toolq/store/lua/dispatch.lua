-- The fair choice of the next jobs of a model, in one step: a worker with free slots calls it,
-- and each job chosen goes onto the model's arq queue, where arq hands it to a worker as before.
-- toolq/store/fair.py explains the rule (stride scheduling on a virtual time):
--
--   the active tenant with the smallest pass that is under its running cap starts its best
--   waiting job (priority 9 first, then arrival); the model's virtual time becomes that pass and
--   the tenant's pass grows by 1 / its weight. A tenant whose set empties leaves the active set
--   and keeps its pass (fair_enqueue.lua brings it back at max(virtual time, that pass)).
--
-- A tenant skipped for being at its cap is moved up to the virtual time afterwards: it is not
-- credited with starts for the time it spent at its cap. The jobs counted against a cap are the
-- tenant's running set (dispatched and not yet ended or paused); when a tenant is at its cap the
-- set is checked against the records first, so a job that ended without saying so (its record
-- expired) never holds a place for good.
--
-- include: now.lua
-- include: fair_keys.lua
--
-- KEYS[1] tenants         the model's active tenants (sorted set: tenant -> pass)
-- KEYS[2] passes          the model's saved passes of idle tenants (hash)
-- KEYS[3] vtime           the model's virtual time
-- KEYS[4] queue           the model's arq queue (sorted set of arq ids by run-from ms)
-- KEYS[5] weights         tenant -> weight (hash)
-- KEYS[6] caps            tenant -> most jobs running at once (hash)
-- KEYS[7] started         tenant -> jobs dispatched so far (hash; the per-tenant starts metric)
-- ARGV[1] model           the model
-- ARGV[2] fair_prefix     toolq.store.keys.FAIR_PREFIX
-- ARGV[3] running_prefix  toolq.store.keys.RUNNING_PREFIX
-- ARGV[4] job_prefix      toolq.store.keys.JOB_PREFIX
-- ARGV[5] arq_prefix      arq's job key prefix
-- ARGV[6] expires_ms      the arq job key's lifetime, renewed as the job is queued
-- ARGV[7] want            at most this many jobs
--
-- Returns {job id, tenant, attempt, stored, ...}: stored 0 means the job's arq payload had
-- expired while it waited, so it is not on the queue and the caller enqueues it with arq itself.

-- Nothing waits (every look at the queue asks, most often for nothing): write nothing.
if redis.call('EXISTS', tenants) == 0 then return {} end
local now = redis_now_ms()
local v = tonumber(redis.call('GET', vtime) or '0')
local v_before = v
local want_n = tonumber(want)
local out = {}
local capped = {}
local n_out = 0

local function at_cap(tenant)
  local cap = tonumber(redis.call('HGET', caps, tenant) or '0') or 0
  if cap <= 0 then return false end
  local rkey = tenant_running_key(running_prefix, tenant)
  local n = redis.call('ZCARD', rkey)
  if n < cap then return false end
  for _, id in ipairs(redis.call('ZRANGE', rkey, 0, -1)) do
    local h = redis.call('HMGET', job_prefix .. '{' .. id .. '}', 'terminal', 'status')
    if h[1] == '1' or not h[2] or h[2] == 'requires_action' then
      redis.call('ZREM', rkey, id)
      n = n - 1
    end
  end
  return n >= cap
end

while n_out < want_n do
  local chosen, pass = nil, nil
  local entries = redis.call('ZRANGE', tenants, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local t = entries[i]
    if not capped[t] then
      if at_cap(t) then
        capped[t] = true
      else
        chosen, pass = t, tonumber(entries[i + 1])
        break
      end
    end
  end
  if not chosen then break end
  local wkey = fair_waiting_key(fair_prefix, model, chosen)
  local picked, attempt = nil, nil
  while true do
    local top = redis.call('ZPOPMIN', wkey)
    if #top == 0 then break end
    local h = redis.call('HMGET', job_prefix .. '{' .. top[1] .. '}', 'terminal', 'status', 'attempt')
    if h[1] ~= '1' and h[2] == 'queued' then
      picked, attempt = top[1], h[3]
      break
    end
    -- ended (cancelled while waiting) or gone: dropped
  end
  if picked == nil then
    redis.call('ZREM', tenants, chosen)  -- nothing live waits: idle, keeping its pass
    redis.call('HSET', passes, chosen, tostring(pass))
  else
    if pass > v then v = pass end
    local w = tonumber(redis.call('HGET', weights, chosen) or '1') or 1
    if w <= 0 then w = 1 end
    local next_pass = pass + 1 / w
    if redis.call('ZCARD', wkey) == 0 then
      redis.call('ZREM', tenants, chosen)
      redis.call('HSET', passes, chosen, tostring(next_pass))
    else
      redis.call('ZADD', tenants, tostring(next_pass), chosen)
    end
    local arq_id = picked .. ':' .. attempt
    local stored = redis.call('PEXPIRE', arq_prefix .. arq_id, expires_ms)
    if stored == 1 then redis.call('ZADD', queue, now, arq_id) end
    redis.call('ZADD', tenant_running_key(running_prefix, chosen), now, picked)
    redis.call('HINCRBY', started, chosen, 1)
    table.insert(out, picked)
    table.insert(out, chosen)
    table.insert(out, attempt)
    table.insert(out, stored)
    n_out = n_out + 1
  end
end
if v ~= v_before then redis.call('SET', vtime, tostring(v)) end
for t, _ in pairs(capped) do
  redis.call('ZADD', tenants, 'XX', 'GT', tostring(v), t)
end
return out
