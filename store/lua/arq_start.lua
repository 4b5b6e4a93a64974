-- A worker's pickup of the arq jobs it read off its queue, all in one step: what arq's
-- Worker.start_jobs does for each job with WATCH / EXISTS / ZSCORE / MULTI PSETEX EXEC (four round
-- trips a job), done here once for the whole batch (store/arq_link.py, WakeableWorker).
-- A job is taken only while no worker has it in progress, it is still on the queue, and its score
-- (the ms it may run from) is not in the future; taking it sets arq's in-progress mark, exactly
-- the key and lifetime arq sets, so arq's own run_job and finish_job, and unstall.lua, see it as
-- before. Redis runs a script alone, so the check and the mark cannot be split by another worker,
-- as WATCH made sure for arq.
--
-- Affinity (store/affinity.py): a job dispatch.lua placed by affinity sits on the shared
-- queue for the moment between its worker's dispatch and that worker's look at the queue, and is
-- listed in KEYS[2] (arq id -> "<worker> <until ms>", Redis's clock) until then. The asking worker
-- takes its own reserved jobs first and leaves another's alone until its time has passed (that
-- worker died in between). The list is read only when it exists, so a pickup without affinity
-- costs no more than before; entries are dropped as their jobs are taken or their time passes.
--
-- include: now.lua
--
-- KEYS[1] queue            the model's arq queue (sorted set of arq ids by run-from ms)
-- KEYS[2] reserved         keys.affinity_reserved(model)
-- ARGV[1] progress_prefix  arq's in-progress key prefix
-- ARGV[2] mark_ms          the in-progress mark's lifetime (arq: job timeout + 10 s)
-- ARGV[3] now_ms           the worker's clock, as arq compares scores with it
-- ARGV[4] arq_ids          the arq ids read off the queue, one per line (those in progress too:
--                          a job stays on arq's queue until it finishes)
-- ARGV[5] limit            take at most this many: the worker's free slots
-- ARGV[6] asking           the asking worker's id
--
-- Returns {arq id, score, ...} of the jobs taken: the asking worker's reserved jobs first, then
-- the rest in the order given.

local holder = {}  -- arq id -> the worker it is reserved for, while its reservation holds
if redis.call('EXISTS', reserved) == 1 then
  local rnow = redis_now_ms()
  local all = redis.call('HGETALL', reserved)
  for i = 1, #all, 2 do
    local w, until_ms = string.match(all[i + 1], '^(%S*) (%d+)$')
    if w and tonumber(until_ms) > rnow then
      holder[all[i]] = w
    else
      redis.call('HDEL', reserved, all[i])
    end
  end
end

local mine, rest = {}, {}
for arq_id in string.gmatch(arq_ids, '[^\n]+') do
  local w = holder[arq_id]
  if w == asking then
    table.insert(mine, arq_id)
  elseif w == nil then
    table.insert(rest, arq_id)
  end
end
for _, id in ipairs(rest) do table.insert(mine, id) end

local out = {}
local left = tonumber(limit)
for _, arq_id in ipairs(mine) do
  if left <= 0 then break end
  local mark = progress_prefix .. arq_id
  if redis.call('EXISTS', mark) == 0 then
    local score = redis.call('ZSCORE', queue, arq_id)
    if score and tonumber(score) <= tonumber(now_ms) then
      redis.call('PSETEX', mark, mark_ms, '1')
      if holder[arq_id] then redis.call('HDEL', reserved, arq_id) end
      table.insert(out, arq_id)
      table.insert(out, score)
      left = left - 1
    end
  end
end
return out
