-- requires: now.lua
-- Shared (`-- include: budget.lua`) by submit.lua and thread_run.lua, which reserve, and
-- emit.lua, which turns a reservation into use and releases what is left at the job's end:
-- a tenant's token budgets (TOOLQ_TENANTS tokens_per_day / tokens_per_minute) charged in the
-- step that queues the job, so parallel submissions see each other (store/budget_holds.py states
-- the rule). Per tenant and window a counter holds what its unfinished jobs reserved; a job is
-- admitted while the window's use plus that counter is below the budget, and reserves its token
-- ceiling, at most what is left. The job keeps `budget_<window>` = "<counter key> <tokens left>";
-- the tokens it spends come off its reservation as the usage windows count them (emit.lua), and
-- its terminal event gives back the rest. A window's counter expires with the window.

local BUDGET_WINDOWS = {
  {name = 'day', budget = 'tokens_per_day', ms = 86400000, ttl = 172800},
  {name = 'minute', budget = 'tokens_per_minute', ms = 60000, ttl = 120},
}

-- The reservations a new job of `tenant` makes ({window, counter key, tokens, ttl}...), or nil and
-- the refusal {-20, budget, used, held, limit, ms until the window ends}. Writes nothing. Given
-- `job` (a paused job that resumes, answer.lua), a window it already holds tokens in is skipped:
-- it was charged there; a window it holds nothing in (a new minute or day since) is charged anew.
local function budget_check(usage_prefix, held_prefix, tenant, per_day, per_minute, ceiling, job)
  local plan = {}
  if ceiling == '' then return plan, nil end
  local limits = {per_day, per_minute}
  local holds = {}
  if job then holds = redis.call('HMGET', job, 'budget_day', 'budget_minute') end
  local t = redis_now_ms()
  for i, w in ipairs(BUDGET_WINDOWS) do
    local index = math.floor(t / w.ms)
    local key = held_prefix .. tenant .. ':' .. w.name .. ':' .. index
    if limits[i] ~= '' and not (holds[i] and string.match(holds[i], '^(.*) ') == key) then
      local limit = tonumber(limits[i])
      local used = tonumber(redis.call('GET', usage_prefix .. tenant .. ':' .. w.name .. ':' .. index) or '0')
      local held = tonumber(redis.call('GET', key) or '0')
      if used + held >= limit then return nil, {-20, w.budget, used, held, limit, w.ms - t % w.ms} end
      plan[#plan + 1] = {w.name, key, math.min(tonumber(ceiling), limit - used - held), w.ttl}
    end
  end
  return plan, nil
end

-- The job's hold of one window, kept in its record as "<counter key> <tokens left>".
local function budget_keep(job, window, counter, left)
  local held = nil
  if left > 0 then held = counter .. ' ' .. left end
  if window == 'day' then
    if held then redis.call('HSET', job, 'budget_day', held) else redis.call('HDEL', job, 'budget_day') end
  else
    if held then redis.call('HSET', job, 'budget_minute', held) else redis.call('HDEL', job, 'budget_minute') end
  end
end

-- Gives back what the job holds in `window` (a hold of a window that has passed, before a new one).
local function budget_drop(job, window)
  local held = nil
  if window == 'day' then held = redis.call('HGET', job, 'budget_day') else held = redis.call('HGET', job, 'budget_minute') end
  if not held then return end
  local counter, left = string.match(held, '^(.*) (%d+)$')
  if tonumber(left) > 0 and redis.call('EXISTS', counter) == 1 then redis.call('DECRBY', counter, tonumber(left)) end
end

local function budget_hold(job, plan)
  for _, p in ipairs(plan) do
    budget_drop(job, p[1])
    redis.call('INCRBY', p[2], p[3])
    redis.call('EXPIRE', p[2], p[4])
    budget_keep(job, p[1], p[2], p[3])
  end
end

-- `tokens` the job just spent come off its holds; nil gives back all that is left (its end).
local function budget_spend(job, tokens)
  local holds = redis.call('HMGET', job, 'budget_day', 'budget_minute')
  for i, w in ipairs(BUDGET_WINDOWS) do
    if holds[i] then
      local counter, left = string.match(holds[i], '^(.*) (%d+)$')
      left = tonumber(left)
      local take = left
      if tokens then take = math.min(tokens, left) end
      -- a window's counter that expired is not made again (it would never expire)
      if take > 0 and redis.call('EXISTS', counter) == 1 then redis.call('DECRBY', counter, take) end
      budget_keep(job, w.name, counter, left - take)
    end
  end
end
