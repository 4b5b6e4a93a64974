-- Append messages to a thread (POST /v1/threads/{id}/messages, a conversation's items) and keep
-- it alive for its TTL. Messages land after whatever is in the thread now; a run active meanwhile
-- appends its own after them when it ends.
--
-- include: thread_touch.lua
-- include: tenant_bytes.lua
--
-- KEYS[1] thread          the thread's hash
-- KEYS[2] messages        the thread's messages (list of Message JSON)
-- KEYS[3] ids             the thread's message ids (list, aligned with messages)
-- ARGV[1] tenant          the caller's tenant: another tenant's thread is not found
-- ARGV[2] items           JSON array of [id, Message JSON] pairs
-- ARGV[3] max_messages    the most messages the thread may hold; '' no cap
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX (tenant_bytes.lua: the messages' bytes)
-- ARGV[4] store_bytes     the bytes the tenant may keep in Redis; '' no quota
--
-- Returns {1, count} the thread's message count, {-3, 0} no such thread, {-4, count} the
-- messages would take it past max_messages (nothing is added), or tenant_bytes.lua's
-- {-30, held, quota, add, jobs, threads, files}.

if redis.call('HGET', thread, 'tenant') ~= tenant then return {-3, 0} end
local pairs_ = cjson.decode(items)
local count = redis.call('LLEN', messages)
if max_messages ~= '' and count + #pairs_ > tonumber(max_messages) then return {-4, count} end
local size = 0
for _, pair in ipairs(pairs_) do size = size + #pair[1] + #pair[2] end
bytes_fold(bytes_prefix, tenant, thread, messages)
local full = bytes_charge(bytes_prefix, tenant, 'thread', messages, size, store_bytes)
if full then return full end
for _, pair in ipairs(pairs_) do
  redis.call('RPUSH', messages, pair[2])
  redis.call('RPUSH', ids, pair[1])
end
thread_touch(thread)
return {1, redis.call('LLEN', messages)}
