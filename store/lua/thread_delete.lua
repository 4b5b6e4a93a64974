-- Delete a thread: its keys and its entry in the tenant's index, in one step. Returns the runs
-- that were active or waiting, which the caller cancels (store/threads.py); a run's end
-- finds no thread then and appends nothing.
--
-- The bytes its messages held leave its tenant's count (tenant_bytes.lua).
--
-- include: tenant_bytes.lua
--
-- KEYS[1] thread          the thread's hash
-- KEYS[2] messages        the thread's messages
-- KEYS[3] ids             the thread's message ids
-- KEYS[4] waiting         the thread's waiting runs
-- KEYS[5] runs            the thread's run ids
-- KEYS[6] index           the tenant's threads (sorted set)
-- ARGV[1] tenant          the caller's tenant: another tenant's thread is not found
-- ARGV[2] thread_id       the thread's id
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX
--
-- Returns {1, run ids...} deleted, {-3} no such thread.

if redis.call('HGET', thread, 'tenant') ~= tenant then return {-3} end
local out = {1}
local active = redis.call('HGET', thread, 'active')
if active and active ~= '' then table.insert(out, active) end
for _, id in ipairs(redis.call('ZRANGE', waiting, 0, -1)) do table.insert(out, id) end
redis.call('DEL', thread, messages, ids, waiting, runs)
redis.call('ZREM', index, thread_id)
bytes_release(bytes_prefix .. tenant, 'thread ' .. messages)
return out
