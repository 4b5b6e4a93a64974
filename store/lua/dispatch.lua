-- The fair choice of the next jobs of a model, in one step: a worker with free slots calls it,
-- and each job chosen goes onto the model's arq queue, where arq hands it to a worker as before.
-- store/fair.py explains the rule (stride scheduling on a virtual time):
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
-- Affinity (store/affinity.py). A job may name a worker it is offered to first (`prefer`,
-- until `prefer_until`: submit.lua and answer.lua write them). Within its tenant's turn such a
-- job is taken by that worker, or by any worker at once when that worker is gone (no registry
-- entry) or full (its load, KEYS[8], says every slot runs a job), or once the wait has passed; a
-- full worker's job only when the asking worker can take no other job of the tenant (pick).
-- Otherwise the asking worker leaves it where it is and takes the tenant's next job instead; a
-- tenant whose first SCAN waiting jobs are all left to other workers keeps its pass and is
-- passed over for this call (it is not moved up to the virtual time, as a capped tenant is: its
-- job starts as soon as its worker asks, within the wait). So the shares between tenants are
-- unchanged: whoever starts a job, its tenant's pass advances by one start. How each job with a
-- preferred worker was placed is counted in KEYS[9] and written to its record (`placed`; every
-- job chosen gets `placed_ms`, when its tenant's turn came, Redis's clock); a job
-- placed by affinity is reserved for its worker on arq's queue for a moment (KEYS[10], read by
-- arq_start.lua).
--
-- Spare capacity (a batch line, `spare` in its record): taken only into one of the asking
-- worker's free engine slots (`slots_free`, its slots less the jobs it runs), never into its
-- interactive reserve, so an interactive job beside a full batch is picked at once. A tenant
-- whose next job is a line and finds no free slot keeps its pass for this call, as a held one.
-- The caller is told whether it saw lines (`lines`), and so looks again when one of its jobs ends.
--
-- Taken at once (`mark_ms` given): the jobs chosen for the asking worker are marked in progress
-- here, with arq's own mark (the key and lifetime arq_start.lua sets), so the worker runs them
-- without a second script call to take them off the queue. They stay on arq's queue, as every
-- job in progress does, so a worker that dies before it starts them leaves them to unstall.lua,
-- as after arq_start.lua. A job taken so needs no affinity reservation.
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
-- KEYS[8] load            worker id -> "<jobs running> <most jobs>" (keys.worker_load)
-- KEYS[9] counts          how jobs with a preferred worker were placed -> count (keys.affinity_counts)
-- KEYS[10] reserved       arq id -> "<worker> <until ms>" of jobs placed by affinity (keys.affinity_reserved)
-- ARGV[1] model           the model
-- const fair_prefix       store.keys.FAIR_PREFIX
-- const running_prefix    store.keys.RUNNING_PREFIX
-- const job_prefix        store.keys.JOB_PREFIX
-- ARGV[2] arq_prefix      arq's job key prefix
-- ARGV[3] expires_ms      the arq job key's lifetime, renewed as the job is queued
-- ARGV[4] want            at most this many jobs
-- ARGV[5] asking          the asking worker's id; '' takes no job that another live worker is offered
-- const worker_prefix     store.keys.WORKER_PREFIX (a worker's registry entry)
-- ARGV[6] worker_wake_prefix   store.keys.worker_wake(model, ''): a worker's own wake list
-- const wake_backlog      how many wake tokens a wake list keeps
-- ARGV[7] reserve_ms      how long a job placed by affinity is its worker's alone on arq's queue
-- ARGV[8] slots_free      the asking worker's free engine slots: at most this many jobs chosen
--                         here may be lines
-- ARGV[9] progress_prefix  arq's in-progress key prefix
-- ARGV[10] mark_ms        the in-progress mark's lifetime (arq: job timeout + 10 s); '' takes nothing
--
-- Returns {held_until, lines_taken, line_left, now, job id, tenant, attempt, stored, how, taken, ...}:
-- lines_taken counts the lines chosen, line_left is 1 when a line was left for want of a free
-- engine slot; held_until is the earliest
-- `prefer_until` of a job left to another worker (0 none), so the caller looks again by then;
-- stored 0 means the job's arq payload had expired while it waited, so it is not on the queue
-- and the caller enqueues it with arq itself; how is '' (no preferred worker), 'affinity',
-- 'fallback_wait', 'fallback_gone' or 'fallback_full'. taken is 1 when the job was marked in progress for
-- the asking worker, which runs it with score `now` (Redis's clock, the score it was queued with).

-- Nothing waits (every look at the queue asks, most often for nothing): write nothing.
if redis.call('EXISTS', tenants) == 0 then return {0, 0, 0, 0} end
local now = redis_now_ms()
local v = tonumber(redis.call('GET', vtime) or '0')
local v_before = v
local want_n = tonumber(want)
local out = {0, 0, 0, now}
local lines_taken, line_left = 0, 0
local lines_ok = tonumber(slots_free)  -- lines this call may still choose
local capped = {}
local held = {}  -- tenants whose first SCAN jobs are all left to other workers, this call
local n_out = 0
local held_until = 0
local SCAN = 64  -- a tenant's waiting jobs looked at per turn
local workers = {}  -- worker id -> 'live' | 'gone' | 'full', read once per call
local woken = {}

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

local function worker_state(w)
  if workers[w] then return workers[w] end
  local st = 'live'
  if redis.call('EXISTS', worker_prefix .. w) == 0 then
    st = 'gone'
  else
    local busy, most = string.match(redis.call('HGET', load, w) or '', '^(%d+) (%d+)$')
    if busy and tonumber(busy) >= tonumber(most) then st = 'full' end
  end
  workers[w] = st
  return st
end

-- How the asking worker may take a waiting job: '' (no preferred worker) or a placement, or nil
-- when the job is left to its preferred worker for now.
local function placement(prefer, until_ms)
  if not prefer or prefer == '' then return '' end
  if prefer == asking then return 'affinity' end
  local st = worker_state(prefer)
  if st == 'gone' then return 'fallback_gone' end
  if st == 'full' then return 'fallback_full' end
  if now >= until_ms then return 'fallback_wait' end
  return nil
end

-- A job offered to another worker woke that worker on its own list (affinity_prefer.lua); taken
-- here, that token would wake it for nothing: drop one.
local function spend_offer(worker)
  if worker and worker ~= '' and worker ~= asking then redis.call('RPOP', worker_wake_prefix .. worker) end
end

-- The tenant's best waiting job this worker may take: (id, attempt, how), or nil and whether
-- some job was left to another worker. A job whose own worker is full is taken only when no other
-- scanned job can be (this worker's own, one without a preferred worker, one whose worker is gone
-- or whose wait has passed): its worker frees a slot soon, and this worker's slot is better spent
-- on a job whose cache may be here than on one that would evaluate its whole prompt again. This
-- worker gets a job either way, so none waits on an idle worker for it.
local function pick(wkey)
  local left = false
  local full_id, full_attempt, full_prefer = nil, nil, nil  -- the first job whose worker is full, taken last
  while true do
    local batch = redis.call('ZRANGE', wkey, 0, SCAN - 1)
    if #batch == 0 then break end
    local dropped = 0
    for _, id in ipairs(batch) do
      local h = redis.call('HMGET', job_prefix .. '{' .. id .. '}', 'terminal', 'status', 'attempt', 'prefer',
                           'prefer_until', 'spare')
      if h[1] ~= '1' and h[2] == 'queued' and h[6] == '1' and lines_ok <= 0 then
        left = true  -- a line, and no free engine slot here: it waits for one
        line_left = 1
      elseif h[1] ~= '1' and h[2] == 'queued' then
        local until_ms = tonumber(h[5] or '0') or 0
        local how = placement(h[4], until_ms)
        if how == 'fallback_full' then
          if not full_id then full_id, full_attempt, full_prefer = id, h[3], h[4] end
        elseif how ~= nil then
          redis.call('ZREM', wkey, id)
          spend_offer(h[4])
          if h[6] == '1' then lines_taken = lines_taken + 1 end
          return id, h[3], how, left
        end
        if how == nil then
          left = true
          if held_until == 0 or until_ms < held_until then held_until = until_ms end
          if not woken[h[4]] then  -- its worker may be blocked on its own wake list: wake it
            woken[h[4]] = true
            local own = worker_wake_prefix .. h[4]
            -- unless a token waits there already (the offer's own, affinity_prefer.lua): a second
            -- would wake it again for nothing
            if redis.call('LLEN', own) == 0 then
              redis.call('LPUSH', own, id)
              redis.call('PEXPIRE', own, 60000)
            end
          end
        end
      else
        redis.call('ZREM', wkey, id)  -- ended (cancelled while waiting) or gone: dropped
        dropped = dropped + 1
      end
    end
    if dropped < #batch then break end
  end
  if full_id then
    redis.call('ZREM', wkey, full_id)
    spend_offer(full_prefer)
    return full_id, full_attempt, 'fallback_full', left
  end
  return nil, nil, nil, left
end

while n_out < want_n do
  local chosen, pass = nil, nil
  local entries = redis.call('ZRANGE', tenants, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local t = entries[i]
    if not capped[t] and not held[t] then
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
  local picked, attempt, how, left = pick(wkey)
  if picked == nil then
    if left then
      held[chosen] = true  -- its jobs wait for their workers: it keeps its pass and place
    else
      redis.call('ZREM', tenants, chosen)  -- nothing live waits: idle, keeping its pass
      redis.call('HSET', passes, chosen, tostring(pass))
    end
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
    local taken = 0
    if stored == 1 and mark_ms ~= '' and asking ~= '' then
      -- NX: a mark of this arq id means another worker has it (arq_start.lua's rule)
      if redis.call('SET', progress_prefix .. arq_id, '1', 'PX', mark_ms, 'NX') then taken = 1 end
    end
    redis.call('ZADD', tenant_running_key(running_prefix, chosen), now, picked)
    redis.call('HINCRBY', started, chosen, 1)
    if how == '' then
      redis.call('HSET', job_prefix .. '{' .. picked .. '}', 'placed_ms', now)
    else
      redis.call('HINCRBY', counts, how, 1)
      redis.call('HSET', job_prefix .. '{' .. picked .. '}', 'placed', how, 'placed_ms', now)
      if how == 'affinity' and taken == 0 then
        local until_ms = now + tonumber(reserve_ms)
        redis.call('HSET', reserved, arq_id, asking .. ' ' .. until_ms)
        redis.call('PEXPIRE', reserved, tonumber(reserve_ms) * 2)  -- entries no pickup saw go with it
      end
    end
    table.insert(out, picked)
    table.insert(out, chosen)
    table.insert(out, attempt)
    table.insert(out, stored)
    table.insert(out, how)
    table.insert(out, taken)
    n_out = n_out + 1
    lines_ok = lines_ok - 1  -- whatever it is, the job takes a free slot first
  end
end
out[1] = held_until
out[2] = lines_taken
out[3] = line_left
if v ~= v_before then redis.call('SET', vtime, tostring(v)) end
for t, _ in pairs(capped) do
  redis.call('ZADD', tenants, 'XX', 'GT', tostring(v), t)
end
return out
