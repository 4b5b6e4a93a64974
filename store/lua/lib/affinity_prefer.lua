-- requires: wake_push.lua
-- requires: now.lua
-- Shared by submit.lua and answer.lua (`-- include: affinity_prefer.lua`): offer a
-- waiting job first to the worker that holds its conversation (store/affinity.py). The
-- record keeps the worker (`prefer`) and until when the others leave the job to it
-- (`prefer_until`, Redis's clock); dispatch.lua reads both. That worker is woken on its own list,
-- since the model's wake token may wake another, which leaves the job alone until then.
-- An empty `worker` or a wait of 0 clears any earlier offer: the job goes to whoever asks first.
local function affinity_prefer(job, worker, wait_ms, worker_wake_prefix, wake_backlog)
  redis.call('HDEL', job, 'prefer', 'prefer_until', 'placed')
  local wait = tonumber(wait_ms) or 0
  if worker == nil or worker == '' or wait <= 0 then return end
  redis.call('HSET', job, 'prefer', worker, 'prefer_until', redis_now_ms() + wait)
  local own = worker_wake_prefix .. worker
  wake_push(own, redis.call('HGET', job, 'attempt') or '1', wake_backlog)
  redis.call('PEXPIRE', own, 60000)  -- a worker that is gone leaves no list behind
end
