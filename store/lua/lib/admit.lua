-- requires: fair_keys.lua
-- Shared (`-- include: admit.lua`) by submit.lua and thread_run.lua: whether
-- a new job of `tenant` may join the queue of `model`, decided in the same step that writes it, so
-- no door can skip it (store/admission.py explains the rule). In short:
--   * a tenant holding `tenant_max` queued jobs of the model (TOOLQ_TENANTS max_queued) is refused;
--   * below `max_depth` queued jobs in all, everyone is admitted;
--   * at or past it, a tenant is admitted only while it holds fewer than its share,
--     floor(max_depth / tenants with jobs queued, itself included), at least 1: one tenant's
--     backlog never shuts the others out;
--   * at twice max_depth everyone is refused: the bound on what the queue holds.
-- Without fair share (`fair` not '1') no tenant's own count is kept, and max_depth is a plain limit.
--
-- A tenant's queued jobs: its fair waiting set plus its thread runs that wait behind their
-- thread's active run (`held`, added by thread_run.lua, removed when their turn comes).

local function held_key(fp, model, tenant)
  if tenant then return fair_model_key(fp, model, 'held:' .. tenant) end
  return fair_model_key(fp, model, 'held')
end

-- Drop held runs that ended (cancelled while waiting, their thread deleted) or whose record expired.
local function admit_prune(fp, model, job_prefix)
  local all = held_key(fp, model)
  for _, id in ipairs(redis.call('ZRANGE', all, 0, -1)) do
    local j = job_prefix .. '{' .. id .. '}'
    local rec = redis.call('HMGET', j, 'tenant', 'terminal')
    if not rec[1] or rec[2] == '1' then
      redis.call('ZREM', all, id)
      local t = redis.call('HGET', all .. ':of', id)
      if t then redis.call('ZREM', held_key(fp, model, t), id) end
      redis.call('HDEL', all .. ':of', id)
    end
  end
end

local function admit_own(fp, model, tenant)
  return redis.call('ZCARD', fair_waiting_key(fp, model, tenant)) + redis.call('ZCARD', held_key(fp, model, tenant))
end

-- A thread run that waits on its thread joins the count; its start (thread_turns.lua) leaves it.
local function admit_hold(fp, model, tenant, job_id, ms)
  redis.call('ZADD', held_key(fp, model), ms, job_id)
  redis.call('HSET', held_key(fp, model) .. ':of', job_id, tenant)
  redis.call('ZADD', held_key(fp, model, tenant), ms, job_id)
end

local function admit_release(fp, model, tenant, job_id)
  redis.call('ZREM', held_key(fp, model), job_id)
  redis.call('HDEL', held_key(fp, model) .. ':of', job_id)
  redis.call('ZREM', held_key(fp, model, tenant), job_id)
end

-- nil: admitted. Else {code, count, limit, tenants}: -3 the tenant's own cap, -4 its share of a
-- full queue, -1 the model's queue is full for everyone.
local function admit(fp, model, tenant, queue, fair, max_depth, tenant_max, job_prefix)
  local own = 0
  if fair == '1' then own = admit_own(fp, model, tenant) end
  if tenant_max ~= '' and own >= tonumber(tenant_max) then
    admit_prune(fp, model, job_prefix)
    own = admit_own(fp, model, tenant)
    if own >= tonumber(tenant_max) then return {-3, own, tonumber(tenant_max), 0} end
  end
  if max_depth == '' then return nil end
  local depth = tonumber(max_depth)
  local function total_and_tenants()
    local total = redis.call('ZCARD', queue) + redis.call('ZCARD', held_key(fp, model))
    local n = 1  -- the tenant asking, and every other tenant with jobs waiting
    for _, t in ipairs(redis.call('ZRANGE', fair_model_key(fp, model, 'tenants'), 0, -1)) do
      local w = redis.call('ZCARD', fair_waiting_key(fp, model, t))
      total = total + w
      if w > 0 and t ~= tenant then n = n + 1 end
    end
    return total, n
  end
  local total, n = total_and_tenants()
  if total < depth then return nil end
  if fair ~= '1' then return {-1, total, depth, 0} end
  admit_prune(fp, model, job_prefix)
  own = admit_own(fp, model, tenant)
  total, n = total_and_tenants()
  if total < depth then return nil end
  if total >= 2 * depth then return {-1, total, 2 * depth, n} end
  local share = math.max(1, math.floor(depth / n))
  if own >= share then return {-4, own, share, n} end
  return nil
end
