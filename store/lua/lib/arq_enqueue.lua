-- Shared by submit.lua and answer.lua (`-- include: arq_enqueue.lua`): put one arq job on a
-- queue the way arq's ArqRedis.enqueue_job stores it. store/arq_link.py builds every value
-- (key names, the payload from arq's own serialize_job, the expiry and the score) and explains
-- why this is not enqueue_job itself; tests/integration/test_arq_contract.py checks that arq
-- reads it back. Like enqueue_job, it does nothing while a job or a result of that id exists.
--
-- arq_store writes only the job key: a job under fair share (fair_enqueue.lua) waits in its
-- tenant's set with its arq payload stored, and dispatch.lua adds it to the queue when it is due.
local function arq_store(job_key, result_key, arq_id, payload, expires_ms)
  if redis.call('EXISTS', job_key, result_key) == 0 then
    redis.call('PSETEX', job_key, expires_ms, payload)
    return true
  end
  return false
end

local function arq_enqueue(job_key, result_key, queue_key, arq_id, payload, expires_ms, score)
  if arq_store(job_key, result_key, arq_id, payload, expires_ms) then
    redis.call('ZADD', queue_key, score, arq_id)
  end
end
