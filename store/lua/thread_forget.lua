-- Remove one message of a thread by its id (DELETE of a conversation item), keeping the ids list
-- aligned with the messages list.
--
-- include: thread_touch.lua
-- include: tenant_bytes.lua
--
-- KEYS[1] thread          the thread's hash
-- KEYS[2] messages        the thread's messages (list of Message JSON)
-- KEYS[3] ids             the thread's message ids (list, aligned with messages)
-- ARGV[1] tenant          the caller's tenant: another tenant's thread is not found
-- ARGV[2] item_id         the message's id
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX: its bytes leave the tenant's count
--
-- Returns 1 removed, 0 no such message, -3 no such thread.

if redis.call('HGET', thread, 'tenant') ~= tenant then return -3 end
local i = redis.call('LPOS', ids, item_id)
if not i then return 0 end
local gone = '\0gone'  -- not JSON, so never a real message
local size = #redis.call('LINDEX', messages, i) + #item_id
bytes_charge(bytes_prefix, tenant, 'thread', messages, -size, '')
redis.call('LSET', messages, i, gone)
redis.call('LREM', messages, 1, gone)
redis.call('LREM', ids, 1, item_id)
thread_touch(thread)
return 1
