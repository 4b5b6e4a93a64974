-- Prove that an event a worker wrote is still in the job's stream on the primary of now, and
-- give the worker's connection a write of its own to WAIT on (store/durability.py): a
-- replica that has this write has everything the primary wrote before it, the event included.
-- Nothing is written when the event is gone (lost with a failed primary) or a newer attempt
-- owns the job.
--
-- KEYS[1] job      the job record (hash)
-- KEYS[2] log      the job's event stream
-- ARGV[1] seq      the event's seq
-- ARGV[2] attempt  the writer's attempt; '' any
--
-- Returns 1 when the event is there (and the write made), 0 when it is not.

if attempt ~= '' and redis.call('HGET', job, 'attempt') ~= attempt then return 0 end
if #redis.call('XRANGE', log, seq .. '-0', seq .. '-0') == 0 then return 0 end
-- the job's seq written again as it is: no change, but a write that replicas receive
local current = redis.call('HGET', job, 'seq')
redis.call('HSET', job, 'seq', current)
return 1
