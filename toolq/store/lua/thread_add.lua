-- Append messages to a thread (POST /v1/threads/{id}/messages, a conversation's items) and keep
-- it alive for its TTL. Messages land after whatever is in the thread now; a run active meanwhile
-- appends its own after them when it ends.
--
-- include: thread_turns.lua
--
-- KEYS[1] thread          the thread's hash
-- KEYS[2] messages        the thread's messages (list of Message JSON)
-- KEYS[3] ids             the thread's message ids (list, aligned with messages)
-- ARGV[1] tenant          the caller's tenant: another tenant's thread is not found
-- ARGV[2] items           JSON array of [id, Message JSON] pairs
--
-- Returns the thread's message count, or -3 no such thread.

if redis.call('HGET', thread, 'tenant') ~= tenant then return -3 end
for _, pair in ipairs(cjson.decode(items)) do
  redis.call('RPUSH', messages, pair[2])
  redis.call('RPUSH', ids, pair[1])
end
thread_touch(thread)
return redis.call('LLEN', messages)
