-- Record one attempt of a webhook delivery and what follows from it, in one step: delivered,
-- tried again after a delay (back in the due set), or dead (the tenant's dead-letter list), and
-- only by the sender holding the latest claim (webhook_claim.lua): a sender whose lease ran out
-- and whose delivery was claimed again settles nothing.
--
-- include: now.lua
--
-- KEYS[1] delivery        the delivery's hash
-- KEYS[2] attempts        the delivery's list of attempts
-- KEYS[3] due             sorted set of due deliveries
-- KEYS[4] dead            the tenant's dead-letter sorted set
-- KEYS[5] job_deliveries  the job's list of delivery ids
-- ARGV[1] id              the delivery's id
-- ARGV[2] token           the claim's token
-- ARGV[3] outcome         'delivered', 'retry' or 'dead'
-- ARGV[4] attempt         the attempt's JSON
-- ARGV[5] delay_ms        with 'retry': when to try again, from now
-- ARGV[6] give_up_ms      with 'retry': a retry later than since_ms + give_up_ms is dead instead
-- ARGV[7] reason          what went wrong ('' when delivered)
-- ARGV[8] keep_s          how long a finished delivery's records are kept
--
-- Returns the delivery's new status, or '' when the claim was not the latest (nothing written).

if redis.call('HGET', delivery, 'token') ~= token then return '' end
local now = redis_now_ms()
redis.call('RPUSH', attempts, attempt)
redis.call('HSET', delivery, 'last_error', reason)
redis.call('HDEL', delivery, 'token')
if outcome == 'retry' then
  local next_ms = now + tonumber(delay_ms)
  local since = tonumber(redis.call('HGET', delivery, 'since_ms'))
  if next_ms <= since + tonumber(give_up_ms) then
    redis.call('HSET', delivery, 'status', 'pending', 'next_ms', next_ms)
    redis.call('ZADD', due, next_ms, id)
    return 'pending'
  end
  outcome = 'dead'
end
redis.call('ZREM', due, id)
redis.call('HDEL', delivery, 'next_ms')
if outcome == 'delivered' then
  redis.call('HSET', delivery, 'status', 'delivered', 'finished_ms', now)
else
  redis.call('HSET', delivery, 'status', 'failed', 'finished_ms', now)
  redis.call('ZADD', dead, now, id)
  redis.call('EXPIRE', dead, keep_s)
end
redis.call('EXPIRE', delivery, keep_s)
redis.call('EXPIRE', attempts, keep_s)
redis.call('EXPIRE', job_deliveries, keep_s)
if outcome == 'delivered' then return 'delivered' end
return 'failed'
