-- Write one event of a job: allocate the next seq, append the event to the job's stream (id
-- `<seq>-0`), publish it on both channels and update the record, all in one step. Once a
-- terminal event is written every later write is refused, and a write fenced by attempt is
-- refused once a newer attempt owns the job (its worker lost its lease).
--
-- include: now.lua
-- include: arq_enqueue.lua
-- include: thread_turns.lua
-- include: thread_end.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- KEYS[3] job_channel     pub/sub channel of this job's events
-- KEYS[4] all_channel     pub/sub channel of every job's events
-- KEYS[5] leases          sorted set: running job id -> lease deadline (ms, Redis's clock)
-- ARGV[1] head            the event's JSON up to its seq
-- ARGV[2] tail            the event's JSON after its seq
-- ARGV[3] terminal        '1' for final, error or cancelled
-- ARGV[4] attempt         the writer's attempt; '0' writes unfenced
-- ARGV[5] only_if_status  write only while the job has this status; '' any
-- ARGV[6] status          the job's new status; '' keeps it
-- ARGV[7] result          the result JSON, stored with a terminal event
-- ARGV[8] checkpoint      the checkpoint JSON; '' keeps the stored one
-- ARGV[9] maxlen          the stream's approximate cap
-- ARGV[10] ttl_s          how long the record and stream live after the terminal event
-- ARGV[11] job_id         the job's id (its member in leases)
-- ARGV[12] lease_ms       set the lease this long from now; '' leaves it
-- ARGV[13] now_ms         the writer's time, stored as finished_ms
-- ARGV[14] thread_messages  a thread run's messages for its thread (thread_end.lua); '' none
-- ARGV[15] thread_prefix  toolq.store.keys.THREAD_PREFIX
-- ARGV[16] job_prefix     toolq.store.keys.JOB_PREFIX
--
-- Returns the event's seq, or: 0 already ended, -1 taken over by a newer attempt,
-- -2 not in the expected status, -3 no such job.

if redis.call('EXISTS', job) == 0 then return -3 end
local h = redis.call('HMGET', job, 'terminal', 'attempt', 'status')
if h[1] == '1' then return 0 end
if attempt ~= '0' and h[2] ~= attempt then return -1 end
if only_if_status ~= '' and h[3] ~= only_if_status then return -2 end
local seq = redis.call('HINCRBY', job, 'seq', 1)
local ev = head .. seq .. tail
redis.call('XADD', log, 'MAXLEN', '~', maxlen, seq .. '-0', 'e', ev)
redis.call('PUBLISH', job_channel, ev)
redis.call('PUBLISH', all_channel, ev)
if status ~= '' then redis.call('HSET', job, 'status', status) end
if checkpoint ~= '' then redis.call('HSET', job, 'checkpoint', checkpoint) end
if lease_ms ~= '' then redis.call('ZADD', leases, redis_now_ms() + tonumber(lease_ms), job_id) end
if terminal == '1' then
  redis.call('HSET', job, 'terminal', '1', 'result', result, 'finished_ms', now_ms)
  redis.call('ZREM', leases, job_id)
  redis.call('EXPIRE', job, ttl_s)
  redis.call('EXPIRE', log, ttl_s)
  thread_end(job, job_id, status, thread_messages, thread_prefix, job_prefix)
end
return seq
