-- Send a failed (dead-lettered) webhook delivery again: back in the due set now, with the same id
-- and a fresh retry period, off the dead-letter list, and its records kept until it ends again.
--
-- include: now.lua
--
-- KEYS[1] delivery        the delivery's hash
-- KEYS[2] attempts        the delivery's list of attempts
-- KEYS[3] due             sorted set of due deliveries
-- KEYS[4] dead            the tenant's dead-letter sorted set
-- KEYS[5] wake            list that wakes the sender
-- ARGV[1] id              the delivery's id
-- ARGV[2] tenant          the caller's tenant: another tenant's delivery does not exist for it
--
-- Returns 1 queued again, 0 no such delivery (for this tenant), -1 the delivery has not failed.

if redis.call('HGET', delivery, 'tenant') ~= tenant then return 0 end
if redis.call('HGET', delivery, 'status') ~= 'failed' then return -1 end
local now = redis_now_ms()
redis.call('HSET', delivery, 'status', 'pending', 'since_ms', now, 'next_ms', now)
redis.call('HDEL', delivery, 'finished_ms')
redis.call('PERSIST', delivery)
redis.call('PERSIST', attempts)
redis.call('ZREM', dead, id)
redis.call('ZADD', due, now, id)
redis.call('LPUSH', wake, id)
redis.call('LTRIM', wake, 0, 0)
return 1
