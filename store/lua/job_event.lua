-- Write one event that concerns only its job: no lease, no terminal step, no webhook, no usage
-- (a token, a tool call, a tool result with its checkpoint). It touches the job's record and
-- stream only, both in the hash slot `{job_id}`, so it runs on a Redis Cluster as it runs on
-- one Redis (docs/architecture/redis.md, "Past one Redis"); every other event goes through emit.lua, which
-- shares its heart (event_write.lua).
--
-- include: event_write.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- ARGV[1] job_channel     pub/sub channel of this job's events
-- ARGV[2] all_channel     pub/sub channel of every job's events
-- ARGV[3] head            the event's JSON up to its seq
-- ARGV[4] tail            the event's JSON after its seq
-- ARGV[5] attempt         the writer's attempt; '0' writes unfenced
-- ARGV[6] only_if_status  write only while the job has this status; '' any
-- ARGV[7] status          the job's new status; '' keeps it
-- ARGV[8] checkpoint      the checkpoint JSON; '' keeps the stored one
-- ARGV[9] maxlen          the stream's approximate cap
--
-- Returns the event's seq, or a refusal (event_write.lua).

local seq = write_event(job, log, job_channel, all_channel, head, tail, attempt, only_if_status, maxlen)
if seq <= 0 then return seq end
if status ~= '' then redis.call('HSET', job, 'status', status) end
if checkpoint ~= '' then redis.call('HSET', job, 'checkpoint', checkpoint) end
return seq
