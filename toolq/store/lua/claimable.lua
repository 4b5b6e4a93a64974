-- Which of the jobs a worker read from arq's queue it may start, in the order it should: first
-- those dispatch.lua placed by affinity for this worker, then every job not reserved for another.
-- A job placed by affinity (`placed` 'affinity', `prefer` its worker) sits on the shared queue
-- for the moment between its worker's dispatch and its worker's look at the queue; the other
-- workers leave it alone for `reserve_ms` from its placement, after which anyone may take it
-- (its worker died in between). toolq/store/arq_link.py (WakeableWorker.start_jobs) calls it.
--
-- include: now.lua
--
-- ARGV[1] asking        the asking worker's id
-- ARGV[2] job_prefix    toolq.store.keys.JOB_PREFIX
-- ARGV[3] reserve_ms    how long a job placed by affinity is its worker's alone
-- ARGV[4] ids           arq ids (<job id>:<attempt>) in queue order, separated by spaces
--
-- Returns the arq ids this worker may start, its own first.

local now = redis_now_ms()
local mine, rest = {}, {}
for arq_id in string.gmatch(ids, '%S+') do
  local job_id = string.match(arq_id, '^(.*):%d+$') or arq_id
  local h = redis.call('HMGET', job_prefix .. '{' .. job_id .. '}', 'placed', 'prefer', 'placed_ms')
  if h[1] == 'affinity' and h[2] == asking then
    table.insert(mine, arq_id)
  elseif h[1] == 'affinity' and now < (tonumber(h[3] or '0') or 0) + tonumber(reserve_ms) then
    -- reserved for its worker a moment longer
  else
    table.insert(rest, arq_id)
  end
end
for _, id in ipairs(rest) do table.insert(mine, id) end
return mine
