-- Start an attempt of a job: write its `started` event (event_write.lua), mark the job running
-- under the worker and attempt that wrote it, set its lease, and give back the record as it now
-- stands, so the worker begins with no read of its own: one round trip less on every pickup,
-- on the way from `queued` to `started` (worker/jobrun.py). Refused as every fenced event is:
-- once the job ended, once a newer attempt owns it, or when there is no such job.
--
-- The event says whether the attempt is `resumed`: a later attempt, or one with a checkpoint to
-- go on from. The record says which, so the caller sends the event's JSON both ways.
--
-- include: event_write.lua
-- include: now.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- KEYS[3] leases          sorted set: running job id -> lease deadline (ms, Redis's clock)
-- ARGV[1] job_channel     pub/sub channel of this job's events
-- ARGV[2] all_channel     pub/sub channel of every job's events
-- ARGV[3] head            the event's JSON up to its seq
-- ARGV[4] fresh           the event's JSON after its seq, for an attempt that starts afresh
-- ARGV[5] resumed         the same, for an attempt that goes on from an earlier one
-- ARGV[6] attempt         the writer's attempt
-- ARGV[7] maxlen          the stream's approximate cap
-- ARGV[8] job_id          the job's id (its member in leases)
-- ARGV[9] lease_ms        the lease, this long from now
-- ARGV[10] worker         the worker that starts it, kept as the record's `worker` with its attempt
--                         as `worker_attempt` (claim.lua counts a taken-over attempt as lost only
--                         if it started; answer.lua offers a resumed pause to that worker)
--
-- Returns {seq, field, value, ...}: the event's seq and the record after the write; or {refusal}
-- (event_write.lua).

-- its length only: a checkpoint can be a long conversation's state, copied out once below
local goes_on = tonumber(attempt) > 1 or redis.call('HSTRLEN', job, 'checkpoint') > 0
local seq = write_event(job, log, job_channel, all_channel, head, goes_on and resumed or fresh, attempt, '', maxlen)
if seq <= 0 then return {seq} end
redis.call('HSET', job, 'status', 'running', 'worker', worker, 'worker_attempt', attempt)
redis.call('ZADD', leases, redis_now_ms() + tonumber(lease_ms), job_id)
local out = redis.call('HGETALL', job)
table.insert(out, 1, seq)
return out
