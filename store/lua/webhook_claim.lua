-- Claim the webhook deliveries that are due, for one sender, under a lease: each claimed delivery
-- stays in the due set with its score moved to the lease's end, so a sender that dies mid-delivery
-- (SIGKILL) loses nothing: the delivery comes due again when the lease ends and another sender (or
-- the same one, restarted) sends it again, with the same id. Only the holder of the latest claim
-- may settle it (webhook_settle.lua checks the token).
--
-- include: now.lua
--
-- KEYS[1] due             sorted set: delivery id -> next due (ms, Redis's clock)
-- ARGV[1] prefix          a delivery's key is prefix .. '{' .. id .. '}' (store.keys.delivery)
-- ARGV[2] token           this claim's token
-- ARGV[3] lease_ms        how long the claim holds
-- ARGV[4] limit           claim at most this many
--
-- Returns a flat list: id, then the delivery's hash as field/value pairs, for each claimed one.

local now = redis_now_ms()
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, tonumber(limit))
local out = {}
for _, id in ipairs(ids) do
  local key = prefix .. '{' .. id .. '}'
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', due, id)  -- expired or removed: nothing to send
  else
    redis.call('HINCRBY', key, 'attempts', 1)
    redis.call('HSET', key, 'token', token, 'status', 'sending')
    redis.call('ZADD', due, now + tonumber(lease_ms), id)
    table.insert(out, id)
    table.insert(out, redis.call('HGETALL', key))
  end
end
return out
