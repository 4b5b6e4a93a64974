-- A worker's pickup of the arq jobs it read off its queue, all in one step: what arq's
-- Worker.start_jobs does for each job with WATCH / EXISTS / ZSCORE / MULTI PSETEX EXEC (four round
-- trips a job), done here once for the whole batch (toolq/store/arq_link.py, WakeableWorker).
-- A job is taken only while no worker has it in progress, it is still on the queue, and its score
-- (the ms it may run from) is not in the future; taking it sets arq's in-progress mark, exactly
-- the key and lifetime arq sets, so arq's own run_job and finish_job, and unstall.lua, see it as
-- before. Redis runs a script alone, so the check and the mark cannot be split by another worker,
-- as WATCH made sure for arq.
--
-- KEYS[1] queue            the model's arq queue (sorted set of arq ids by run-from ms)
-- ARGV[1] progress_prefix  arq's in-progress key prefix
-- ARGV[2] mark_ms          the in-progress mark's lifetime (arq: job timeout + 10 s)
-- ARGV[3] now_ms           the worker's clock, as arq compares scores with it
-- ARGV[4] arq_ids          the arq ids read off the queue, one per line (those in progress too:
--                          a job stays on arq's queue until it finishes)
-- ARGV[5] limit            take at most this many: the worker's free slots
--
-- Returns {arq id, score, ...} of the jobs taken, in the order given.

local out = {}
local left = tonumber(limit)
for arq_id in string.gmatch(arq_ids, '[^\n]+') do
  if left <= 0 then break end
  local mark = progress_prefix .. arq_id
  if redis.call('EXISTS', mark) == 0 then
    local score = redis.call('ZSCORE', queue, arq_id)
    if score and tonumber(score) <= tonumber(now_ms) then
      redis.call('PSETEX', mark, mark_ms, '1')
      table.insert(out, arq_id)
      table.insert(out, score)
      left = left - 1
    end
  end
end
return out
