-- Create a thread (POST /v1/threads, a conversation) under its tenant's cap on threads, in one
-- step: its hash, its first messages with their ids, its entry in the tenant's index, its TTL.
-- The index keeps the ids of threads that expired since (store/threads.py), so a tenant at
-- its cap first has those dropped, and only live threads count.
--
-- include: tenant_bytes.lua
--
-- KEYS[1] thread          the new thread's hash
-- KEYS[2] messages        its messages (list of Message JSON)
-- KEYS[3] ids             its message ids (list, aligned with messages)
-- KEYS[4] index           the tenant's threads (sorted set: thread id -> created ms)
-- ARGV[1] thread_id       the new thread's id
-- ARGV[2] tenant          its tenant
-- ARGV[3] created_ms      its creation time
-- ARGV[4] metadata        its metadata JSON
-- ARGV[5] ttl_s           seconds it lives after its last write; '' never expires
-- ARGV[6] items           JSON array of [id, Message JSON] pairs (its first messages)
-- ARGV[7] max_threads     the tenant's cap on its threads; '' none
-- const thread_prefix     store.keys.THREAD_PREFIX: a thread's key is thread_prefix .. '{' .. id .. '}'
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX (tenant_bytes.lua: its messages' bytes)
-- ARGV[8] store_bytes     the bytes the tenant may keep in Redis; '' no quota
--
-- Returns {1, count} created (the tenant's threads now), {-1, count} the tenant is at its cap, or
-- tenant_bytes.lua's {-30, held, quota, add, jobs, threads, files}.

if max_threads ~= '' and redis.call('ZCARD', index) >= tonumber(max_threads) then
  for _, id in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    if redis.call('EXISTS', thread_prefix .. '{' .. id .. '}') == 0 then redis.call('ZREM', index, id) end
  end
  local n = redis.call('ZCARD', index)
  if n >= tonumber(max_threads) then return {-1, n} end
end
local pairs_ = cjson.decode(items)
local size = 0
for _, pair in ipairs(pairs_) do size = size + #pair[1] + #pair[2] end
local full = bytes_charge(bytes_prefix, tenant, 'thread', messages, size + #metadata, store_bytes)
if full then return full end
redis.call('HSET', thread, 'tenant', tenant, 'created_ms', created_ms, 'metadata', metadata, 'ttl_s', ttl_s,
           'active', '')
for _, pair in ipairs(pairs_) do
  redis.call('RPUSH', messages, pair[2])
  redis.call('RPUSH', ids, pair[1])
end
redis.call('ZADD', index, created_ms, thread_id)
if ttl_s ~= '' then
  for _, k in ipairs({thread, messages, ids}) do redis.call('EXPIRE', k, ttl_s) end
end
return {1, redis.call('ZCARD', index)}
