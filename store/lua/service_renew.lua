-- Keep a call an instance is running from being claimed by another: reset its idle time, but
-- only while it is still pending for this consumer (XCLAIM alone would take it back from an
-- instance that claimed it meanwhile).
--
-- KEYS[1] calls     the tool's call stream
-- ARGV[1] group     toolq.keys.SERVICE_GROUP
-- ARGV[2] consumer  the running instance's consumer name
-- ARGV[3] entry_id  the call's stream entry
--
-- Returns 1 renewed, 0 no longer this consumer's.

local pending = redis.call('XPENDING', calls, group, entry_id, entry_id, 1)
if pending[1] == nil or pending[1][2] ~= consumer then return 0 end
redis.call('XCLAIM', calls, group, consumer, 0, entry_id, 'JUSTID')
return 1
