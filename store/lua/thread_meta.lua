-- Replace a thread's metadata, only while the thread exists and is the caller's (a delete in
-- between wins), and keep it alive for its TTL.
--
-- include: thread_touch.lua
--
-- KEYS[1] thread          the thread's hash
-- ARGV[1] tenant          the caller's tenant: another tenant's thread is not found
-- ARGV[2] metadata        the metadata JSON
--
-- Returns 1, or -3 no such thread.

if redis.call('HGET', thread, 'tenant') ~= tenant then return -3 end
redis.call('HSET', thread, 'metadata', metadata)
thread_touch(thread)
return 1
