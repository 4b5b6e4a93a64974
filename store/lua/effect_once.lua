-- The decision to act on an effect, taken once per effect key (toolq/tools/journal.py).
-- The record is a hash: state 'acting' (a runner holds it until until_ms) or 'done' (result).
--
-- KEYS[1] record   the effect's record (toolq.keys.effect)
-- ARGV[1] owner    this runner's id
-- ARGV[2] hold_ms  how long this runner may act before another may take over
-- ARGV[3] ttl_ms   how long the record is kept
--
-- Returns {'done', result}: recorded before, do not act; {'busy', until_ms}: another runner holds
-- it; {'act', runs}: act now (runs > 1: an earlier runner's hold ran out with no result, so its
-- outcome is unknown: it may have acted).
-- include: now.lua

local now = redis_now_ms()
local state = redis.call('HGET', record, 'state')
if state == 'done' then
  return {'done', redis.call('HGET', record, 'result')}
end
if state == 'acting' then
  local until_ms = tonumber(redis.call('HGET', record, 'until_ms'))
  if redis.call('HGET', record, 'owner') ~= owner and until_ms > now then
    return {'busy', tostring(until_ms)}
  end
end
local runs = redis.call('HINCRBY', record, 'runs', 1)
redis.call('HSET', record, 'state', 'acting', 'owner', owner, 'until_ms', tostring(now + tonumber(hold_ms)))
redis.call('PEXPIRE', record, tonumber(ttl_ms))
return {'act', tostring(runs)}
