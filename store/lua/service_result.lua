-- Accept a tool service's result for one call, once per call id, and only from the instance the
-- call was handed to: the entry must be pending for this consumer in the group (handed by
-- XREADGROUP or claimed by XAUTOCLAIM), and carry this call id. A result for a call id that
-- already has one is not accepted again (delivery is at-least-once: a claimed call can run twice).
-- The entry is acknowledged and deleted once answered, so the stream holds only open calls.
--
-- KEYS[1] calls     the tool's call stream
-- KEYS[2] result    the call's accepted result (set once)
-- KEYS[3] reply     the list the caller BLPOPs
-- ARGV[1] group     toolq.keys.SERVICE_GROUP
-- ARGV[2] consumer  the posting instance's consumer name
-- ARGV[3] entry_id  the stream entry it was handed
-- ARGV[4] call_id   the call id it answers
-- ARGV[5] payload   the outcome, JSON
-- ARGV[6] ttl_ms    how long the result is kept for a caller that asks again
--
-- Returns 'accepted', 'duplicate' (a result was accepted before) or 'not_handed'.

local pending = redis.call('XPENDING', calls, group, entry_id, entry_id, 1)
local mine = pending[1] ~= nil and pending[1][2] == consumer
if mine then
  local entry = redis.call('XRANGE', calls, entry_id, entry_id)
  local fields = entry[1] and entry[1][2] or {}
  local said = nil
  for i = 1, #fields, 2 do
    if fields[i] == 'call_id' then said = fields[i + 1] end
  end
  mine = said == call_id
end
if not mine then
  if redis.call('EXISTS', result) == 1 then return 'duplicate' end
  return 'not_handed'
end
redis.call('XACK', calls, group, entry_id)
redis.call('XDEL', calls, entry_id)
if not redis.call('SET', result, payload, 'NX', 'PX', tonumber(ttl_ms)) then return 'duplicate' end
redis.call('LPUSH', reply, payload)
redis.call('PEXPIRE', reply, tonumber(ttl_ms))
return 'accepted'
