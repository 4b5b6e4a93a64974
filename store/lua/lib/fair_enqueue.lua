-- Shared by submit.lua and answer.lua (`-- include: fair_enqueue.lua`): a job joins its tenant's
-- waiting set for its model, ordered by priority (9 first) then arrival, and the tenant joins the
-- model's active tenants if it was idle. store/fair.py explains the rule; in short, a tenant
-- that becomes active starts at max(the model's virtual time, the pass it left with): an idle
-- tenant is not credited for its idle time (it does not start behind everyone else's virtual
-- time) nor penalised (it starts level with the tenant served last), and a tenant that empties
-- its set for a moment keeps the pass it earned. The arq job itself is stored (arq_store in
-- arq_enqueue.lua) but not queued: store/lua/dispatch.lua queues it when its turn comes.
local PRIORITY_SPAN = 1e13  -- arrival numbers stay below this, so priority always sorts first

local function fair_enqueue(tenants, passes, vtime, waiting, seq_key, weights, caps,
                            tenant, job_id, priority, weight, max_running)
  local seq = redis.call('INCR', seq_key)
  redis.call('ZADD', waiting, (9 - tonumber(priority)) * PRIORITY_SPAN + seq, job_id)
  if not redis.call('ZSCORE', tenants, tenant) then
    local v = tonumber(redis.call('GET', vtime) or '0')
    local saved = tonumber(redis.call('HGET', passes, tenant) or '0')
    redis.call('ZADD', tenants, math.max(v, saved), tenant)
  end
  -- written only when they change: every submit brings them, and a write is replicated
  if weight ~= '' and redis.call('HGET', weights, tenant) ~= weight then
    redis.call('HSET', weights, tenant, weight)
  end
  if max_running ~= '' and redis.call('HGET', caps, tenant) ~= max_running then
    redis.call('HSET', caps, tenant, max_running)
  end
end
