-- Shared by emit.lua and job_event.lua (`-- include: event_write.lua`): the heart of every event
-- write. Allocate the next seq, append the event to the job's stream (id `<seq>-0`) and publish
-- it on both channels, refusing a write after the terminal event, from a superseded attempt
-- ('0' writes unfenced) or outside the expected status. Only the job's own keys are touched, its
-- record and its stream (one hash slot, `{job_id}`); the channels are not keys.
--
-- Returns the seq, the event's JSON and the job's tenant (read in the same HMGET, for emit.lua's
-- counts), or a refusal: 0 already ended, -1 taken over by a newer attempt, -2 not in the expected
-- status, -3 no such job.
local function write_event(job, log, job_channel, all_channel, head, tail, attempt, only_if_status, maxlen)
  if redis.call('EXISTS', job) == 0 then return -3 end
  local h = redis.call('HMGET', job, 'terminal', 'attempt', 'status', 'tenant')
  if h[1] == '1' then return 0 end
  if attempt ~= '0' and h[2] ~= attempt then return -1 end
  if only_if_status ~= '' and h[3] ~= only_if_status then return -2 end
  local seq = redis.call('HINCRBY', job, 'seq', 1)
  local ev = head .. seq .. tail
  redis.call('XADD', log, 'MAXLEN', '~', maxlen, seq .. '-0', 'e', ev)
  redis.call('PUBLISH', job_channel, ev)
  redis.call('PUBLISH', all_channel, ev)
  return seq, ev, h[4]
end
