-- Record a paused job's answers (tool results from its caller, or approvals) in one step, and
-- when none is missing, resume it: a new attempt, status `queued`, out of the paused index, its
-- arq job and a wake token, and the `queued` event. toolq/jobstore.py (JobStore.answer_actions)
-- checks the answers against the `actions` it read and sends that snapshot along: the script
-- writes only while the record still holds exactly it (else -4, and the caller reads again), so a
-- call can never be answered twice, even by two posts at once. Refusals change nothing.
--
-- include: arq_enqueue.lua
--
-- KEYS[1] job             the job record (hash)
-- KEYS[2] log             the job's event stream
-- KEYS[3] job_channel     pub/sub channel of this job's events
-- KEYS[4] all_channel     pub/sub channel of every job's events
-- KEYS[5] paused          sorted set: paused job id -> action deadline (unix ms)
-- KEYS[6] arq_job         the new attempt's arq job key
-- KEYS[7] arq_result      the new attempt's arq result key
-- KEYS[8] queue           the model's queue (arq's sorted set)
-- KEYS[9] wake            the model's wake list
-- ARGV[1] job_id          the job's id
-- ARGV[2] tenant          only this tenant's job; '' any
-- ARGV[3] attempt         the paused attempt the snapshot was read from
-- ARGV[4] seen            the `actions` JSON the answers were checked against
-- ARGV[5] actions         the `actions` JSON with the answers recorded
-- ARGV[6] complete        '1' when every action has its answer: resume the job
-- ARGV[7] head            the queued event's JSON up to its seq
-- ARGV[8] tail            the queued event's JSON after its seq
-- ARGV[9] maxlen          the stream's approximate cap
-- ARGV[10] arq_id         the new attempt's arq id (its member in the queue)
-- ARGV[11] payload        the new attempt's arq payload
-- ARGV[12] expires_ms     the arq job key's lifetime
-- ARGV[13] score          the arq job's score in the queue
-- ARGV[14] wake_backlog   how many wake tokens the wake list keeps
--
-- Returns {1, ''} recorded (answers still missing), {2, seq} recorded and resumed (seq of the
-- queued event), {0, status} the job ended, {-2, status} the job is not paused, {-3, ''} no such
-- job (or another tenant's), {-4, ''} the record changed since it was read.

local h = redis.call('HMGET', job, 'tenant', 'terminal', 'status', 'attempt', 'actions')
if not h[1] or (tenant ~= '' and h[1] ~= tenant) then return {-3, ''} end
if h[2] == '1' then return {0, h[3]} end
if h[3] ~= 'requires_action' then return {-2, h[3] or ''} end
if h[4] ~= attempt or h[5] ~= seen then return {-4, ''} end
redis.call('HSET', job, 'actions', actions)
if complete ~= '1' then return {1, ''} end
redis.call('HINCRBY', job, 'attempt', 1)
redis.call('HSET', job, 'status', 'queued')
redis.call('ZREM', paused, job_id)
local seq = redis.call('HINCRBY', job, 'seq', 1)
local ev = head .. seq .. tail
redis.call('XADD', log, 'MAXLEN', '~', maxlen, seq .. '-0', 'e', ev)
redis.call('PUBLISH', job_channel, ev)
redis.call('PUBLISH', all_channel, ev)
arq_enqueue(arq_job, arq_result, queue, arq_id, payload, expires_ms, score)
redis.call('LPUSH', wake, job_id)
redis.call('LTRIM', wake, 0, tonumber(wake_backlog) - 1)
return {2, seq}
