-- Shared (`-- include: job_index.lua`): a new job in the recent-jobs indexes that the dashboard
-- lists (store/job_index.py): its tenant's and every tenant's, each a sorted set of job
-- id -> submit time (ms), trimmed to the newest `keep`. A member whose record has expired is
-- dropped when it is read.
local function index_job(tenant_jobs, all_jobs, job_id, created_ms, keep)
  local n = tonumber(keep)
  for _, index in ipairs({tenant_jobs, all_jobs}) do
    redis.call('ZADD', index, created_ms, job_id)
    redis.call('ZREMRANGEBYRANK', index, 0, -(n + 1))
  end
end
