-- Shared by the thread scripts (`-- include: thread_touch.lua`): a thread's keys kept alive for
-- its TTL. A thread's keys are its hash key plus a suffix (store/keys.py: thread_*).

-- Keep every key of the thread alive for its TTL from now (none when the thread has no TTL).
-- While a run is active the thread does not expire at all: the runs waiting behind it live only
-- in the thread's keys, and would otherwise be lost with them; its end sets the TTL again.
local function thread_touch(tkey)
  local ttl = redis.call('HGET', tkey, 'ttl_s')
  if ttl and ttl ~= '' then
    local busy = (redis.call('HGET', tkey, 'active') or '') ~= ''
    for _, k in ipairs({tkey, tkey .. ':messages', tkey .. ':ids', tkey .. ':waiting', tkey .. ':runs'}) do
      if busy then redis.call('PERSIST', k) else redis.call('EXPIRE', k, ttl) end
    end
  end
end
