-- Close an effect's record (toolq/tools/journal.py). 'done': record its result under its key,
-- once; the first result recorded is the one every later run returns. 'failed': the runner did
-- not act (its function raised), so its hold is dropped and the next run may act at once.
--
-- KEYS[1] record   the effect's record (toolq.keys.effect)
-- ARGV[1] owner    the runner that held it
-- ARGV[2] outcome  'done' or 'failed'
-- ARGV[3] result   the result, JSON ('' when failed)
-- ARGV[4] ttl_ms   how long the record is kept
--
-- Returns the recorded result (this one, or one recorded before it), or false when none is.

if redis.call('HGET', record, 'state') == 'done' then
  return redis.call('HGET', record, 'result')
end
if outcome ~= 'done' then
  if redis.call('HGET', record, 'owner') == owner then
    redis.call('HSET', record, 'state', 'free')
    redis.call('HDEL', record, 'owner', 'until_ms')
  end
  return false
end
redis.call('HSET', record, 'state', 'done', 'result', result)
redis.call('HDEL', record, 'owner', 'until_ms')
redis.call('PEXPIRE', record, tonumber(ttl_ms))
return result
